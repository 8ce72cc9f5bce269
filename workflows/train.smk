# One job per run: (benchmark, hardware, method, seed). The hardware profile decides the launcher,
# the cores and the scheduler resources; the trainer command is built in common.smk.
#
# Interrupted runs. The trainer checkpoints into its run directory and resumes from there on its
# own, so the run directory must survive a killed job. The only declared output is summary.json,
# which the trainer writes (atomically) when the run has reached its budget: Snakemake then
# deletes nothing but that file when it cleans up after a failure, and rerunning the job
# (`--rerun-incomplete`, set in profiles/default) continues from the checkpoint rather than from
# step 0. Declaring evals.jsonl/steps.jsonl as outputs would make Snakemake delete the partial
# curves (and with `directory()` the checkpoint too) before the rerun.
#
# The trainer also rewrites summary.json (status "running") at every checkpoint; a job that is
# killed leaves it marked incomplete, and the rerun deletes it before resuming.
#
# Cached results. The base model and the trainer defaults are `ancient` inputs: a finished run is
# not retrained because a file was touched or rebuilt. Snakemake still reruns a job whose input
# another job is about to create, so a finished run whose base model is not on disk (a fresh clone
# with the committed results/ has no models/) does not ask for one: otherwise training any new
# run (say the ablations) would rebuild the warm start and retrain every cached run after it.
# Changing a run's command line (params) still retrains it where Snakemake has a record of it,
# which is what a changed config should do.


def train_inputs(wc):
    inputs = {"trainer_config": ancient(config["trainer_config"])}
    marker = base_model_marker(wc.benchmark)
    finished = run_status(RUN_DIR.format(**wc)) == "complete"
    if marker and (Path(marker).exists() or not finished):
        inputs["base_model"] = ancient(marker)
    return inputs


rule train:
    input:
        unpack(train_inputs),
    output:
        summary=f"{RUN_DIR}/summary.json",
    params:
        cmd=train_command,
    threads: lambda wc: hardware_profile(wc.hardware)["threads"]
    resources:
        **train_resources(),
    log:
        f"{LOGS}/train/{{benchmark}}/{{hardware}}/{{method}}/seed{{seed}}.log",
    shell:
        "{params.cmd} > {log} 2>&1"
