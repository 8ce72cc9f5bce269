# The study's comparisons -> results/summary.csv (+ .md): time to 99% / 100% of the baseline's
# peak, speedups with per-seed bootstrap intervals, seconds per step by phase (pods.analysis).


rule study_file:
    # The comparisons as pods.analysis reads them; params carry them so that editing the study
    # in the config rewrites this file (and the tables after it), and nothing else.
    output:
        STUDY_FILE,
    params:
        comparisons=COMPARISONS,
    localrule: True
    run:
        import os, tempfile

        text = yaml.safe_dump({"comparisons": params.comparisons}, sort_keys=False)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(output[0]) or ".", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, output[0])


rule analyze:
    input:
        study=STUDY_FILE,
        runs=run_files(),
    output:
        csv=report(
            SUMMARY_CSV,
            caption="report/summary.rst",
            category="Tables",
        ),
        md=SUMMARY_MD,
    params:
        runs=RUNS,
    localrule: True
    log:
        f"{LOGS}/analyze.log",
    shell:
        "pods analyze --runs {params.runs} --study {input.study} --out {output.csv} > {log} 2>&1"


def print_summary(path):
    """The table a study target ends with, on the terminal that asked for it."""
    print(f"\n{path}:\n\n{Path(path).read_text()}", flush=True)
