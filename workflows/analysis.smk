import os
import time

from pods.study.tables import draws_arms

# The study's comparisons -> results/summary.csv (+ .md): time to 99% / 100% of the baseline's
# peak, speedups with per-seed bootstrap intervals, seconds per step by phase (pods.study.analysis).


rule study_file:
    # The comparisons as pods.study.analysis reads them; params carry them so that editing the study
    # in the config rewrites this file (and the tables after it), and nothing else; so does its
    # marker where Snakemake has no record of the params (a fresh clone).
    input:
        unpack(lambda wc: by_content("study_file")),
    output:
        STUDY_FILE,
    params:
        comparisons=COMPARISONS,
    localrule: True
    run:
        atomic_write_text(output[0], study_text())


def study_text():
    return yaml.safe_dump({"comparisons": COMPARISONS}, sort_keys=False)


# the study file is fresh when it says what the config says (its content is all it has)
derived("study_file", dict)
FRESH["study_file"] = Path(STUDY_FILE).is_file() and Path(STUDY_FILE).read_text() == study_text()
derived("analyze", lambda: {"study": STUDY_FILE, "runs": run_files()}, upstream=["study_file"])


def analyze_inputs(wildcards):
    """The analysis's inputs; where they are not those it read before, every finished run is read
    and checked now (pods.runs.read_run), so that a broken line stops the workflow before any job,
    naming its file and line, rather than the analysis job under its list of inputs."""
    inputs = by_content("analyze")
    if not fresh("analyze"):
        from pods.runs import read_run

        for path in sorted(FINISHED):
            read_run(path)
    return inputs


rule analyze:
    input:
        unpack(analyze_inputs),
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
    run:
        shell("pods analyze --runs {params.runs} --study {input.study} --out {output.csv} > {log} 2>&1")
        write_stamp("analyze", {"study": STUDY_FILE, "runs": finished_run_files()})



# speedup = step efficiency / step-cost ratio beside the paper's settings, and the projections of
# our step efficiency onto the paper's hardware and onto any phase-cost files the study names.
# The paper's summary is read as it is, not rebuilt: it is a committed reference whose rule
# (paper_figures) needs the authors' release; after regenerating it, `--forcerun project`.
# It is read as absent while parsing: `snakemake paper_figures`, which writes it, and every target
# that does not read it run without it; a target that does (reproduce, figures) is refused before
# any job starts, in project_inputs.
PAPER_SUMMARY = config["paper_summary"]
# beside the summary they are computed from, so that a study layered over the default (ablations)
# never overwrites the default study's tables
PROJECTION_DIR = str(Path(SUMMARY_CSV).parent)
PROJECTION_FILES = [f"{PROJECTION_DIR}/{name}.{ext}" for name in ("decomposition", "projection") for ext in ("csv", "md")]
# a study with two or more arms against one baseline (the field, the ablations) also places them on
# the plane of learning per step against cost per step (pods.study.tables.draws_arms)
PROJECTION_FIGURES = [f"{FIGURES}/{name}.{ext}" for name in ("decomposition", "projection") for ext in ("png", "pdf")]
if draws_arms(COMPARISONS):
    PROJECTION_FIGURES += [f"{FIGURES}/arms.{ext}" for ext in ("png", "pdf")]


def project_inputs(wildcards):
    if PAPER_SUMMARY and not Path(PAPER_SUMMARY).is_file():
        refuse(f"paper_summary: no file {PAPER_SUMMARY} (`snakemake paper_figures` writes it; "
               f"--config paper_summary=null: our comparisons alone)")
    return by_content("project")


derived("project", lambda: {"summary": SUMMARY_CSV, "costs": list(config["cost_files"])}, upstream=["analyze"],
        extra=lambda: [PAPER_SUMMARY] if PAPER_SUMMARY else [])


rule project:
    input:
        unpack(project_inputs),
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
        write_stamp("project")


# The verdict's other views: the speedup at every accuracy level (profile), the per-seed times to
# the target as Kaplan-Meier curves, and the calibration harness's table for this study's arms
# (coverage, false decisions, power of every endpoint at 4, 10 and 30 seeds; pods calibrate).
VERDICT_VIEW_FILES = [f"{PROJECTION_DIR}/{name}" for name in ("speedup_profile.csv", "calibration.csv", "calibration.md")]
VERDICT_VIEW_FIGURES = [f"{FIGURES}/{name}.{ext}" for name in ("speedup_profile", "time_to_target") for ext in ("png", "pdf")]


derived("verdict_views", lambda: {"study": STUDY_FILE, "summary": SUMMARY_CSV},
        {"studies": config["calibration"]["studies"], "boot": config["calibration"]["boot"],
         "primary_studies": config["calibration"]["primary_studies"]},
        upstream=["study_file", "analyze"])


rule verdict_views:
    input:
        # the runs are final once the summary is
        unpack(lambda wc: by_content("verdict_views")),
    params:
        studies=config["calibration"]["studies"],
        boot=config["calibration"]["boot"],
        primary_studies=config["calibration"]["primary_studies"],
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
                                    boot=params.boot, primary_studies=params.primary_studies)
            print(*written, sep="\n", file=fh)
        write_stamp("verdict_views")


# When this command started and how many runs were finished then: tables older than that were
# re-used, not rewritten. Jobs that Snakemake runs in a process of their own parse this file again:
# the environment carries the first parse's values to them.
STARTED = float(os.environ.setdefault("PODS_WORKFLOW_STARTED", repr(time.time())))
FINISHED_AT_START = int(os.environ.setdefault("PODS_WORKFLOW_FINISHED_RUNS", str(len(FINISHED))))


def print_bottom_line():
    """The lines a study target ends with on stdout (pods.study.headline): what ran or was re-used,
    how many primary endpoints are decided, the estimates beside the paper's claim, the tables."""
    from pods.study.headline import bottom_line, confirmation_lines, confirmation_of, read_rows

    rewritten = Path(SUMMARY_CSV).stat().st_mtime >= STARTED
    lines = bottom_line(read_rows(SUMMARY_CSV), tables=[SUMMARY_MD, SUMMARY_CSV, f"{FIGURES}/"],
                        runs_total=len(STUDY.runs), runs_reused=FINISHED_AT_START,
                        analysis="rewritten now" if rewritten else "re-used (their inputs are unchanged)")
    look = confirmation_of(config.get("confirmation_results"), COMPARISONS)
    if look:  # this study's confirmation on fresh seeds is the answer: first, the study's own seeds after it
        lines = [*confirmation_lines(look, config=config.get("confirmation_config") or "its config"), "",
                 "Exploratory (this study's own seeds; the confirmation above is the answer)", *lines[1:]]
    print("\n" + "\n".join(lines), flush=True)
