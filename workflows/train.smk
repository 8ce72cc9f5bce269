# One job per run: (benchmark, hardware, method, seed). The hardware profile decides the launcher,
# the cores and the scheduler resources; the trainer command is built by pods.study.plan.
#
# Interrupted runs. The trainer checkpoints into its run directory and resumes from there on its
# own, so the run directory must survive a killed job. The only declared output is summary.json
# (written atomically, with status "running" at every checkpoint and "complete" at the end):
# Snakemake deletes nothing but that file when it cleans up after a failure, and rerunning the job
# (`--rerun-incomplete`, set in profiles/default) continues from the checkpoint rather than from
# step 0. Declaring evals.jsonl/steps.jsonl as outputs would make Snakemake delete the partial
# curves (and with `directory()` the checkpoint too) before the rerun. Snakemake marks the output
# of a job it started as incomplete until the job succeeds, so after a kill (of the job or of
# Snakemake itself) the rerun deletes that summary.json and resumes. A run killed outside Snakemake
# (a hand-started `pods train`) leaves a "running" summary that Snakemake takes as done: `figures`
# refuses it, and `--forcerun <its summary.json>` resumes it. So does a confirmation's run of look 2
# or later killed together with Snakemake: it enters the plan only after the `look` checkpoint, and
# Snakemake consults its incomplete markers only for the jobs of the first plan.
#
# Finished runs are final. A run whose summary.json says `complete` (the committed results/, or
# one trained earlier) is read by the analysis from its files directly and never enters the DAG
# again (`run_inputs` in common.smk; a confirmation's looks read their runs the same way): no
# rebuilt warm start, re-measured cost, changed config or changed rule retrains it; delete its
# directory (or pick another results_dir) to train it again. The trainer itself refuses to
# continue a checkpoint under a different config, so retraining in place would fail anyway. The
# base model and the trainer defaults are `ancient` inputs, so touching them does not restart runs
# in progress either.


def train_inputs(wc):
    inputs = {"trainer_config": ancient(STUDY.trainer_config)}
    marker = PATHS.base_model_marker(wc.benchmark)
    if marker:
        if PATHS.uses_warmstart(wc.benchmark):
            check_base(wc.benchmark)
        inputs["base_model"] = ancient(marker)
    for i, (kind, hub_id) in enumerate(STUDY.run_config(run_from(wc)).hub_needs):
        inputs[f"hub_{i}"] = ancient(PATHS.hub_marker(kind, hub_id))
    # clock: cost. The run's steps are its budget over its arm's measured cost. A measured cost is
    # final like a finished run (the runs trained on it took their step counts from it), so only a
    # missing one is asked for: a rebuilt base must not re-measure it between a confirmation's
    # looks. Delete the file to measure again.
    cost_file = PATHS.step_cost_file(wc.benchmark, wc.hardware)
    if config["clock"] == "cost" and not Path(cost_file).is_file():
        inputs["step_cost"] = cost_file
    return inputs


# clock: cost. Each arm's seconds per step on this benchmark and hardware, measured by `pods cost` in
# interleaved rounds before any run trains there. It takes every core the workflow has, so nothing
# runs beside it: the measurement is the one place the clock enters the primaries (docs/verdict.md).
# (os.cpu_count(), not workflow.cores: a cluster executor has no --cores, and a local run caps a
# rule's threads at its --cores anyway.)
rule step_cost:
    input:
        trainer_config=ancient(STUDY.trainer_config),
        base_model=lambda wc: ancient(PATHS.base_model_marker(wc.benchmark) or STUDY.trainer_config),
    output:
        f"{PATHS.step_costs}/{{benchmark}}/{{hardware}}.json",
    params:
        cmd=lambda wc: STUDY.step_cost_command(wc.benchmark, wc.hardware),
    threads: os.cpu_count()
    log:
        f"{LOGS}/cost/{{benchmark}}/{{hardware}}.log",
    shell:
        "{params.cmd} > {log} 2>&1"


rule train:
    input:
        unpack(train_inputs),
    output:
        summary=f"{RUN_DIR}/summary.json",
    params:
        cmd=train_command,
    threads: lambda wc: STUDY.profile(wc.hardware).threads
    # a seeded shuffle of the runs (schedule_seed): which runs share the machine is randomised
    priority: lambda wc: STUDY.train_priority(run_from(wc))
    resources:
        **train_resources(),
    log:
        run_path(f"{LOGS}/train", **{component: f"{{{component}}}" for component in RUN_KEY}) + ".log",
    shell:
        "{params.cmd} > {log} 2>&1"
