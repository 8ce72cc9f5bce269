# Base models: the embedded benchmarks start from a supervised warm start, built once per
# benchmark and shared by every run of it (all methods, seeds and designs start from the same
# weights, as the paper's arms all start from the same instruct model). Benchmarks whose
# base_model is a model folder or hub id need no rule here.


# The code a warm start depends on: a change to any of it (or to the recipe in params) builds the
# base model again, and every run records the fingerprint of the base it started from, so runs
# from different bases are never compared (pods.analysis.check_same_start).
WARMSTART_CODE = [
    str(Path(workflow.basedir, "pods", name))
    for name in ("warmstart.py", "models.py", "evaluation.py", "batches.py", "rollout/hf.py", "rollout/base.py", "tasks/__init__.py",
                 "tasks/base.py", "tasks/arith.py")
]


rule warmstart:
    input:
        WARMSTART_CODE,
    output:
        marker=STUDY.warmstart_marker("{benchmark}"),
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
