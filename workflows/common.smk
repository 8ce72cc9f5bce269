# Paths, the set of runs, and the command lines: everything the rules share.
#
# The study config (validated against config/schema.yaml in the Snakefile) declares comparisons;
# this file expands them into runs, checks what the schema cannot (a design's n/m relations, that
# every benchmark and hardware profile exists), and builds the trainer command of each run from
# its hardware profile. Any problem raises ValueError naming the config key, before any job runs.
import json
import shlex
import sys
from pathlib import Path

import jsonschema
import yaml

from pods.config import load_train_config, parse_method

RESULTS = config["results_dir"].rstrip("/")
MODELS = config["models_dir"].rstrip("/")
FIGURES = config["figures_dir"].rstrip("/")
RUNS = f"{RESULTS}/runs"
LOGS = f"{RESULTS}/logs"
SUMMARY_CSV = f"{RESULTS}/{config['summary']}"
SUMMARY_MD = SUMMARY_CSV[: -len(".csv")] + ".md"
STUDY_FILE = str(Path(SUMMARY_CSV).with_name("study.yaml"))

RUN_DIR = RUNS + "/{benchmark}/{hardware}/{method}/seed{seed}"

wildcard_constraints:
    benchmark=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    hardware=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method=r"(grpo|pods-[a-z_]+)-n\d+-m\d+",
    seed=r"\d+",


# ---------------------------------------------------------------------------------------------
# Comparisons -> runs
# ---------------------------------------------------------------------------------------------
def rollouts_per_prompt(benchmark, hardware, method):
    """Rollouts a run generates per prompt, as its trainer resolves them (defaults file, then the
    run's overrides; `rollouts_per_prompt: null` is one group of n)."""
    cfg = load_train_config(config["trainer_config"], train_overrides(benchmark, hardware, method, 0))
    return cfg.groups_per_prompt * cfg.n


def _check_design(where, design, benchmark, hardware, baseline, method):
    """The paper's two designs fix what the arms share (PAPER.md 2.1.6 and 2.2)."""
    if design == "equal_update" and method.m != baseline.m:
        raise ValueError(
            f"{where}: equal_update trains the same m in both arms, but the baseline "
            f"{baseline.name} trains m={baseline.m} and {method.name} trains m={method.m}"
        )
    if design == "equal_generation":
        base_n, method_n = (rollouts_per_prompt(benchmark, hardware, arm.name) for arm in (baseline, method))
        if base_n != method_n:
            raise ValueError(
                f"{where}: equal_generation generates as many rollouts per prompt in both arms, but on "
                f"{benchmark}/{hardware} the baseline {baseline.name} generates {base_n} "
                f"and {method.name} generates {method_n}"
            )


# Comparison keys that only the analysis reads (pods.analysis study-file format).
ANALYSIS_KEYS = ("grid_s", "t_max_s", "eval_set")


def expand_comparisons(cfg):
    """One row per (comparison, benchmark, hardware, method): the study file the analysis reads."""
    rows = []
    for i, comp in enumerate(cfg["comparisons"]):
        where = f"comparisons[{i}]"
        baseline = parse_method(comp["baseline"])
        if not baseline.is_grpo:
            raise ValueError(f"{where}.baseline: {comp['baseline']!r} is not a vanilla GRPO run")
        seeds = comp.get("seeds", cfg["seeds"])
        seeds = list(range(seeds)) if isinstance(seeds, int) else seeds  # a count N: seeds 0 .. N-1
        for label in comp["benchmarks"]:
            if label not in cfg["benchmarks"]:
                raise ValueError(f"{where}.benchmarks: {label!r} is not declared under `benchmarks`")
        for label in comp["hardware"]:
            try:
                hardware_profile(label)
            except ValueError as exc:
                raise ValueError(f"{where}.hardware: {exc}") from None
        for benchmark in comp["benchmarks"]:
            for hardware in comp["hardware"]:
                for j, name in enumerate(comp["methods"]):
                    # m_scaling varies m on purpose and is read against the baseline's target only.
                    if comp["name"] != "m_scaling":
                        _check_design(f"{where}.methods[{j}]", comp["design"], benchmark, hardware,
                                      baseline, parse_method(name))
                    row = dict(
                        name=comp["name"], design=comp["design"], benchmark=benchmark,
                        hardware=hardware, baseline=comp["baseline"], method=name,
                        seeds=list(seeds),
                    )
                    row.update({k: comp[k] for k in ANALYSIS_KEYS if k in comp})
                    rows.append(row)
    return rows


def study_runs(rows):
    """The union of every comparison's arms: each (benchmark, hardware, method, seed) once."""
    runs = {}
    for row in rows:
        for method in (row["baseline"], row["method"]):
            for seed in row["seeds"]:
                key = (row["benchmark"], row["hardware"], method, seed)
                runs[key] = dict(benchmark=key[0], hardware=key[1], method=key[2], seed=key[3])
    return list(runs.values())


def run_dir(run):
    return RUN_DIR.format(**run)


def run_summary(path):
    """The run's summary.json (None before it started): its status is `running` mid-run,
    `complete` once the trainer finished, `failed` when it stopped on a non-finite number."""
    summary = Path(path, "summary.json")
    if not summary.exists():
        return None
    try:
        record = json.loads(summary.read_text())
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def run_status(path):
    return (run_summary(path) or {}).get("status")


# ---------------------------------------------------------------------------------------------
# Hardware profiles
# ---------------------------------------------------------------------------------------------
_PROFILE_SCHEMA = None
_PROFILES = {}
PROFILE_DEFAULTS = dict(num_processes=1, nodes=1, launcher_args="", launcher_prefix="", train={})


def hardware_profile(name):
    """config/hardware/<name>.yaml, validated against schema.yaml#/definitions/hardware_profile."""
    global _PROFILE_SCHEMA
    if name not in _PROFILES:
        path = Path(config["hardware_dir"]) / f"{name}.yaml"
        if not path.is_file():
            raise ValueError(f"hardware {name!r}: no profile file {path}")
        profile = yaml.safe_load(path.read_text()) or {}
        if _PROFILE_SCHEMA is None:
            schema = yaml.safe_load(Path(workflow.basedir, "config", "schema.yaml").read_text())
            _PROFILE_SCHEMA = {**schema["definitions"]["hardware_profile"], "definitions": schema["definitions"]}
        try:
            jsonschema.validate(profile, _PROFILE_SCHEMA)
        except jsonschema.ValidationError as exc:
            key = ".".join(str(p) for p in exc.absolute_path) or "(top level)"
            raise ValueError(f"{path}: {key}: {exc.message}") from None
        _PROFILES[name] = {**PROFILE_DEFAULTS, **profile}
    return _PROFILES[name]


# Launchers: profile -> the command that runs `pods <command>` on every process of a run. The
# profile's launcher_prefix and launcher_args go in verbatim (not quoted) so that they can use the
# job's environment ($SLURM_JOB_NODELIST, $MASTER_ADDR, ...) for multi-node rendezvous.
LAUNCHERS = {
    "none": lambda p: "pods",
    "accelerate": lambda p: (
        f"accelerate launch --num_processes {p['num_processes'] * p['nodes']} "
        f"--num_machines {p['nodes']} {p['launcher_args']} -m pods.cli"
    ),
    "torchrun": lambda p: (
        f"torchrun --nnodes {p['nodes']} --nproc_per_node {p['num_processes']} "
        f"{p['launcher_args']} -m pods.cli"
    ),
    "deepspeed": lambda p: (
        f"deepspeed --num_nodes {p['nodes']} --num_gpus {p['num_processes']} "
        f"{p['launcher_args']} --module pods.cli"
    ),
}


def launch_prefix(profile):
    return " ".join(f"{profile['launcher_prefix']} {LAUNCHERS[profile['launcher']](profile)}".split())


# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------
def format_value(value):
    """key=value text the trainer's override parser reads back as YAML: lists in flow style."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")


def format_overrides(overrides):
    return [f"{key}={format_value(value)}" for key, value in overrides.items()]


def benchmark_cfg(label):
    return config["benchmarks"][label]


def uses_warmstart(label):
    return benchmark_cfg(label)["base_model"] == "warmstart"


def base_model_dir(label):
    return f"{MODELS}/{label}/base" if uses_warmstart(label) else benchmark_cfg(label)["base_model"]


def base_model_marker(label):
    """The file whose existence means the benchmark's base model is ready, when the workflow builds
    it: a warm start (its warmstart.json is written after the model folder is saved), or any
    folder under models_dir that another rule writes (e.g. the SmolLM2 conversion). None for a
    model the trainer loads by itself (a hub id or a folder outside models_dir)."""
    if uses_warmstart(label):
        return warmstart_marker(label)
    path = benchmark_cfg(label)["base_model"].rstrip("/")
    if path.startswith(MODELS + "/"):
        return f"{path}/config.json"
    return None


def warmstart_marker(label):
    return f"{MODELS}/{label}/base/warmstart.json"


def train_overrides(benchmark, hardware, method, seed):
    """Every key the run's trainer gets on top of the defaults file, in precedence order."""
    m = parse_method(method)
    bench = benchmark_cfg(benchmark)
    overrides = {
        **hardware_profile(hardware).get("train", {}),
        **config.get("train", {}),
        **bench.get("train", {}),
    }
    overrides.update(
        benchmark=bench.get("task", benchmark), hardware=hardware, n=m.n, m=m.m, rule=m.rule,
        seed=int(seed), base_model=base_model_dir(benchmark),
        run_dir=RUN_DIR.format(benchmark=benchmark, hardware=hardware, method=method, seed=seed),
    )
    return overrides


def train_command(wildcards):
    profile = hardware_profile(wildcards.hardware)
    overrides = train_overrides(wildcards.benchmark, wildcards.hardware, wildcards.method, wildcards.seed)
    argv = ["train", "--config", config["trainer_config"], *format_overrides(overrides)]
    return f"{launch_prefix(profile)} {shlex.join(argv)}"


def warmstart_command(wildcards, output_dir):
    ws = config.get("warmstart", {})
    bench = benchmark_cfg(wildcards.benchmark)
    overrides = {
        **ws.get("overrides", {}),
        **bench.get("warmstart", {}),
        "benchmark": bench.get("task", wildcards.benchmark),
        "out_dir": output_dir,
    }
    config_args = ["--config", ws["config"]] if ws.get("config") else []
    return shlex.join(["pods", "warmstart", *config_args, *format_overrides(overrides)])


def train_resources():
    """Snakemake resources of the train rule, per run from its hardware profile.

    A rule's resource names are fixed when the workflow is parsed, so the rule declares the
    union over the profiles this study uses; a profile that lacks one asks for 0 of it.
    """
    names = sorted({k for hw in HARDWARE for k in hardware_profile(hw)["resources"]})
    return {
        name: (lambda wc, name=name: hardware_profile(wc.hardware)["resources"].get(name, 0))
        for name in names
    }


# Everything the Snakefile targets need, computed once at parse time so that a bad config fails
# before the DAG is built.
if config.get("warmstart", {}).get("config") and not Path(config["warmstart"]["config"]).is_file():
    raise ValueError(f"warmstart.config: no file {config['warmstart']['config']}")
if not Path(config["trainer_config"]).is_file():
    raise ValueError(f"trainer_config: no file {config['trainer_config']}")
COMPARISONS = expand_comparisons(config)
RUNS_LIST = study_runs(COMPARISONS)
HARDWARE = sorted({run["hardware"] for run in RUNS_LIST})
# Run directories whose summary.json says `complete` (or `failed`): read once, used by every target below.
SUMMARIES = {run_dir(run): run_summary(run_dir(run)) or {} for run in RUNS_LIST}
FINISHED = {path for path, summary in SUMMARIES.items() if summary.get("status") == "complete"}
FAILED = {path: summary.get("failure", {}) for path, summary in SUMMARIES.items() if summary.get("status") == "failed"}


def failure_lines():
    return [f"  {path}: failed at step {f.get('step')}: {f.get('reason')}" for path, f in sorted(FAILED.items())]


# A run that stopped on a non-finite number (its summary.json says `failed`; a run the workflow
# trains is named in Snakemake's error report instead, with its log) would fail the same way again:
# it needs a person, so every target stops here and names it.
if FAILED:
    raise ValueError(
        f"{len(FAILED)} run(s) of this study stopped on a numerical failure:\n" + "\n".join(failure_lines())
        + "\nDelete a run's folder to train it again, or change the config and use another results_dir."
    )


# A clone carries the committed runs of the default study; say so, or a `reproduce` that finishes
# in seconds looks like a study that did not run. (onstart: once per execution, not again when
# Snakemake re-reads the workflow to run a `run:` job.)
onstart:
    if FINISHED:
        print(
            f"{len(FINISHED)} of this study's {len(RUNS_LIST)} runs are finished under {RUNS}: they are "
            f"analysed as they are, never retrained. To train the study on this machine, give it a new "
            f"folder: --config results_dir=results/local figures_dir=figures/local",
            file=sys.stderr,
        )


def run_files():
    """What the analysis waits for, per run: a finished run's files as they are on disk (no rule
    makes them, so the train rule is never asked about it), or the summary.json the train rule
    writes when the run is still to be trained or resumed."""
    files = []
    for run in RUNS_LIST:
        path = run_dir(run)
        if path in FINISHED:
            files += [f"{path}/evals.jsonl", f"{path}/steps.jsonl"]
        else:
            files.append(f"{path}/summary.json")
    return files


def cached_results():
    """The `figures` target: tables and figures from finished runs only, never a training job."""
    todo = [run_dir(run) for run in RUNS_LIST if run_dir(run) not in FINISHED]
    if todo:
        raise ValueError(
            f"figures: {len(todo)} of the study's {len(RUNS_LIST)} runs have no finished results "
            f"(e.g. {todo[0]}); `snakemake reproduce` trains them"
        )
    return [SUMMARY_CSV, SUMMARY_MD, *figure_files(), *PROJECTION_FILES, *PROJECTION_FIGURES]
