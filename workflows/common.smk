# The study every rule shares: one pods.study.plan.Study built from the merged config (validated against
# config/schema.yaml in the Snakefile). Building it expands the comparisons into runs, loads the
# hardware profiles and resolves every run's trainer config, so a bad key or value in any layer
# fails here, naming its file and key, before any job exists. The rules below are thin input
# functions over it.
import sys
from pathlib import Path

import yaml

from pods.atomic import atomic_write_text
from pods.vocabulary import METHOD_PATTERN
from pods.vocabulary import RUN_KEY, run_path
from pods.study import stamps
from pods.study.expansion import Run, run_from
from pods.study.plan import Study, summary_or_empty

with refused_in_one_line():
    STUDY = Study(config, schema=STUDY_SCHEMA)

PATHS = STUDY.paths
RESULTS, MODELS, FIGURES = PATHS.results, PATHS.models, PATHS.figures
# A results folder inside a run directory (`--config results_dir=<a finished run's folder>`) would
# plan the whole study inside that run.
for _folder in (Path(RESULTS).absolute(), *Path(RESULTS).absolute().parents):
    if (_folder / "summary.json").is_file() or (_folder / "evals.jsonl").is_file():
        refuse(f"results_dir: {RESULTS} is inside the run directory {_folder}; give the study a folder of its own "
               f"(e.g. results_dir=results/local)")
RUNS, LOGS = PATHS.runs_dir, PATHS.logs
SUMMARY_CSV, SUMMARY_MD, STUDY_FILE = PATHS.summary_csv, PATHS.summary_md, PATHS.study_file
RUN_DIR = run_path(RUNS, benchmark="{benchmark}", hardware="{hardware}", method="{method}", seed="{seed}")
COMPARISONS = STUDY.study_rows()

wildcard_constraints:
    benchmark=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    hardware=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method=METHOD_PATTERN,  # pods.vocabulary's method names, spelled there once
    seed=r"\d+",


def train_command(wildcards):
    return STUDY.train_command(run_from(wildcards))


def train_resources():
    """Snakemake resources of the train rule, per run from its hardware profile."""
    return {name: (lambda wc, name=name: STUDY.resource(wc.hardware, name)) for name in STUDY.resource_names()}


# Run directories whose summary.json says `complete` (or `failed`): read once, used by every target below.
SUMMARIES = STUDY.summaries()
FINISHED = {path for path, summary in SUMMARIES.items() if summary.get("status") == "complete"}
FAILED = {path: summary.get("failure", {}) for path, summary in SUMMARIES.items() if summary.get("status") == "failed"}


def failed_runs_message() -> str:
    """A run that stopped on a non-finite number would fail the same way again: it needs a person.
    Only the targets that read it stop (`figures` here, the analysis job of `reproduce` in
    `pods analyze`); `paper_figures`, `--report` and the training of the other runs go on."""
    return (f"{len(FAILED)} run(s) of this study stopped on a numerical failure:\n"
            + "\n".join(f"  {path}: failed at step {f.get('step')}: {f.get('reason')}" for path, f in sorted(FAILED.items()))
            + "\nDelete a run's folder to train it again, or change the config and use another results_dir.")


# A clone carries the committed runs of the default study; say so, or a `reproduce` that finishes
# in seconds looks like a study that did not run. (onstart: once per execution, not again when
# Snakemake re-reads the workflow to run a `run:` job.)
onstart:
    if FINISHED:
        print(
            f"{len(FINISHED)} of this study's {len(STUDY.runs)} runs are finished under {RUNS}: they are "
            f"analysed as they are, never retrained. To train the study on this machine, give it a new "
            f"folder: --config results_dir=results/local figures_dir=figures/local",
            file=sys.stderr,
        )


# Content, not times, decides whether a derived table or figure is stale (pods.study.stamps): a fresh
# clone gives the committed tables and their inputs checkout times in any order. Each derived rule
# writes a stamp of its inputs' contents beside the tables when it has written its outputs. While
# parsing, a rule whose stamp matches the inputs as they are, and whose upstream derived rules are
# fresh too, reads its inputs as `ancient` (Snakemake ignores their times); any other has its
# marker input (a file under the git-ignored logs) touched now, which makes it run whatever the
# other times say. A --forcerun / -F run goes by Snakemake's own rules (nothing is ancient).
STAMPS = f"{Path(SUMMARY_CSV).parent}/stamps"
CHANGED = f"{LOGS}/changed"


def forced():
    """--forcerun / -F (the DAG settings exist once the DAG is built, when input functions run)."""
    settings = workflow.dag_settings
    return bool(settings is not None and (settings.forceall or settings.forcerun))


DERIVED = {}  # derived rule -> (its inputs() as named files, params, upstream rules, extra files)
FRESH = {}  # derived rule -> whether its outputs are those of its inputs as they are (once known)


def stamp_of(name):
    return f"{STAMPS}/{name}.json"


def _files(inputs):
    return [f for value in inputs.values() for f in ([value] if isinstance(value, str) else value)]


def derived(name, inputs, params=None, upstream=(), extra=lambda: []):
    """Declare derived rule `name`: `inputs()` its named input files, `upstream` the derived rules
    they come from, `extra()` files whose contents count without being Snakemake inputs."""
    DERIVED[name] = (inputs, params, tuple(upstream), extra)


def fresh(name):
    if name not in FRESH:
        inputs, params, upstream, extra = DERIVED[name]
        FRESH[name] = (not forced() and all(map(fresh, upstream))
                       and stamps.unchanged(stamp_of(name), [*_files(inputs()), *extra()], params))
    return FRESH[name]


def by_content(name):
    """The named inputs of derived rule `name` (an input function for `unpack`): ancient when fresh;
    otherwise as they are, with the rule's marker touched now so that it runs."""
    inputs = {**DERIVED[name][0](), "changed": f"{CHANGED}/{name}"}  # the marker is always an input:
    marker = Path(inputs["changed"])  # Snakemake's own record of the set of inputs never changes
    marker.parent.mkdir(parents=True, exist_ok=True)
    if fresh(name):
        if not marker.exists():
            marker.touch()
        return {key: ancient(value) if isinstance(value, str) else [ancient(f) for f in value]
                for key, value in inputs.items()}
    marker.touch()  # now: newer than any output
    return inputs


def write_stamp(name, inputs=None):
    """At the end of a derived job: its outputs are those of its inputs as they are now (`inputs`
    where they differ from the declared ones, as the analysis's run files do once trained)."""
    declared, params, _, extra = DERIVED[name]
    stamps.write(stamp_of(name), [*_files(inputs or declared()), *extra()], params)


def is_finished(path: str) -> bool:
    """Whether the run in `path` is complete: the study's runs as read once at start (FINISHED); a
    run the study does not list (a confirmation's later batch) read when it is asked about."""
    return (SUMMARIES[path] if path in SUMMARIES else summary_or_empty(path)).get("status") == "complete"


def run_inputs(path: str) -> list[str]:
    """What an analysis waits for from one run: a finished run's files as they are on disk (no rule
    makes them, so the train rule is never asked about it: no rebuilt base or re-measured cost
    retrains it), or the summary.json the train rule writes when the run is still to be trained or
    resumed (a failed run's summary.json, which `pods analyze` then refuses naming the failure)."""
    return [f"{path}/evals.jsonl", f"{path}/steps.jsonl"] if is_finished(path) else [f"{path}/summary.json"]


def run_files():
    """What the study's analysis waits for: run_inputs of each of its runs."""
    return [file for path in map(PATHS.run_dir, STUDY.runs) for file in run_inputs(path)]


def finished_run_files():
    """run_files() once every run is finished: what the analysis reads, as its stamp records it."""
    return [f"{path}/{name}" for path in map(PATHS.run_dir, STUDY.runs) for name in ("evals.jsonl", "steps.jsonl")]


def cached_results():
    """The `figures` target: tables and figures from finished runs only, never a training job."""
    if FAILED:
        refuse(failed_runs_message())
    todo = [path for path in map(PATHS.run_dir, STUDY.runs) if path not in FINISHED]
    if todo:
        refuse(f"figures: {len(todo)} of the study's {len(STUDY.runs)} runs have no finished results "
               f"(e.g. {todo[0]}); `snakemake reproduce` trains them")
    return [SUMMARY_CSV, SUMMARY_MD, *figure_files(), *PROJECTION_FILES, *PROJECTION_FIGURES,
            *VERDICT_VIEW_FILES, *VERDICT_VIEW_FIGURES]
