# Base models: the embedded benchmarks start from a supervised warm start, built once per
# benchmark and shared by every run of it (all methods, seeds and designs start from the same
# weights, as the paper's arms all start from the same instruct model). A base model, tokenizer
# or dataset given as a hub id is fetched once (fetch_hub) and every train job reads that folder;
# a benchmark whose base_model is a local folder needs no rule here.
import json

from pods.training.warmstart_config import KERNELS_VARIABLE, base_differences, code_files


# The code a warm start depends on: every module of the package `pods warmstart` imports, read off
# their sources (pods.training.warmstart_config.code_files). A change to any of it (or to the recipe
# in params) builds the base model again, and every run records the fingerprint of the base it
# started from, so runs from different bases are never compared (pods.study.analysis.check_same_start).
WARMSTART_CODE = [str(path) for path in code_files()]


def check_base(label):
    """A base already under models_dir must be the one this study's warm start builds, with the same
    recipe on the same CPU kernels (a hand-built one is another model): checked for the runs still
    to train, before any job starts."""
    marker = Path(PATHS.warmstart_marker(label))
    if not marker.is_file():
        return
    kernels = config.get("aten_cpu_capability")
    differences = base_differences(json.loads(marker.read_text()), STUDY.configs.warmstart_config(label), kernels)
    if differences:
        command = (f"{KERNELS_VARIABLE}={kernels} " if kernels else "") + STUDY.warmstart_command(label)
        refuse(f"{marker.parent} is not this study's warm start ({'; '.join(differences)}): delete it and the "
               f"workflow builds it, or build it as the workflow does: rm -r {marker.parent} && {command}")


rule warmstart:
    input:
        WARMSTART_CODE,
    output:
        marker=PATHS.warmstart_marker("{benchmark}"),
    params:
        cmd=lambda wc: STUDY.warmstart_command(wc.benchmark),
    threads: config["warmstart"]["threads"]
    resources:
        mem_mb=3000,
        runtime=30,
    log:
        f"{LOGS}/warmstart/{{benchmark}}.log",
    shell:
        "{params.cmd} > {log} 2>&1"


# One job per hub id the study's runs read (pods.study.run_configs.RunConfig.hub_needs), at the revision
# hub_revisions pins; the folder's hub.json (written last) records the commit fetched. It runs on
# the machine Snakemake runs on (`localrule`): cluster login nodes reach the hub, compute nodes
# often do not, and train jobs never download.
rule fetch_hub:
    output:
        marker=f"{MODELS}/hub/{{repo_type}}s/{{hub_id}}/hub.json",
    wildcard_constraints:
        repo_type="model|dataset",
        hub_id=r"[A-Za-z0-9][\w.-]*/[\w.-]+",
    params:
        cmd=lambda wc: STUDY.hub_fetch_command(wc.repo_type, wc.hub_id),
    localrule: True
    retries: 2  # a dropped connection; the cache keeps what arrived
    log:
        f"{LOGS}/fetch/{{repo_type}}/{{hub_id}}.log",
    shell:
        "{params.cmd} > {log} 2>&1"
