# The study's comparisons -> results/summary.csv (+ .md): time to 99% / 100% of the baseline's
# peak, speedups with per-seed bootstrap intervals, seconds per step by phase (pods.study.analysis).


rule study_file:
    # The comparisons as pods.study.analysis reads them; params carry them so that editing the study
    # in the config rewrites this file (and the tables after it), and nothing else.
    output:
        STUDY_FILE,
    params:
        comparisons=COMPARISONS,
    localrule: True
    run:
        atomic_write_text(output[0], yaml.safe_dump({"comparisons": params.comparisons}, sort_keys=False))


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



# speedup = step efficiency / step-cost ratio beside the paper's settings, and the projections of
# our step efficiency onto the paper's hardware and onto any phase-cost files the study names.
# The paper's summary is read as it is, not rebuilt: it is a committed reference whose rule
# (paper_figures) needs the authors' release; after regenerating it, `--forcerun project`.
PAPER_SUMMARY = config["paper_summary"]
if PAPER_SUMMARY and not Path(PAPER_SUMMARY).is_file():
    raise ValueError(f"paper_summary: no file {PAPER_SUMMARY} (`snakemake paper_figures` writes it; null: none)")
# beside the summary they are computed from, so that a study layered over the default (ablations)
# never overwrites the default study's tables
PROJECTION_DIR = str(Path(SUMMARY_CSV).parent)
PROJECTION_FILES = [f"{PROJECTION_DIR}/{name}.{ext}" for name in ("decomposition", "projection") for ext in ("csv", "md")]
PROJECTION_FIGURES = [f"{FIGURES}/{name}.{ext}" for name in ("decomposition", "projection") for ext in ("png", "pdf")]


rule project:
    input:
        summary=SUMMARY_CSV,
        costs=config["cost_files"],
    params:
        paper=PAPER_SUMMARY,
    output:
        PROJECTION_FILES,
        [report(f, caption="report/projection.rst", category="Figures", subcategory="verdict")
         if f.endswith(".png") else f for f in PROJECTION_FIGURES],
    localrule: True
    log:
        f"{LOGS}/project.log",
    run:
        from pods.study.views import project

        with open(log[0], "w") as fh:
            written = project(input.summary, params.paper, input.costs, PROJECTION_DIR, FIGURES)
            print(*written, sep="\n", file=fh)


# The verdict's other views: the speedup at every accuracy level (profile), the per-seed times to
# the target as Kaplan-Meier curves, and the calibration harness's table for this study's arms
# (coverage, false decisions, power of every endpoint at 4, 10 and 30 seeds; pods calibrate).
VERDICT_VIEW_FILES = [f"{PROJECTION_DIR}/{name}" for name in ("speedup_profile.csv", "calibration.csv", "calibration.md")]
VERDICT_VIEW_FIGURES = [f"{FIGURES}/{name}.{ext}" for name in ("speedup_profile", "time_to_target") for ext in ("png", "pdf")]


rule verdict_views:
    input:
        study=STUDY_FILE,
        summary=SUMMARY_CSV,  # the runs are final once the summary is
    params:
        studies=config["calibration"]["studies"],
        boot=config["calibration"]["boot"],
    output:
        VERDICT_VIEW_FILES,
        [report(f, caption=f"report/{Path(f).stem}.rst", category="Figures", subcategory="verdict")
         if f.endswith(".png") else f for f in VERDICT_VIEW_FIGURES],
    localrule: True
    log:
        f"{LOGS}/verdict_views.log",
    run:
        from pods.study.views import verdict_views

        with open(log[0], "w") as fh:
            written = verdict_views(RUNS, input.study, PROJECTION_DIR, FIGURES, studies=params.studies,
                                    boot=params.boot)
            print(*written, sep="\n", file=fh)


def print_summary(path):
    """The table a study target ends with, on the terminal that asked for it."""
    print(f"\n{path}:\n\n{Path(path).read_text()}", flush=True)
