"""A study: its comparisons expanded into runs, every run's trainer config resolved and checked, and
the commands that build and train them.

The Snakemake workflow is a thin layer over this module (`workflows/common.smk` builds one `Study`
from the merged, schema-validated config and its rules call it), so everything here is unit-tested
without Snakemake (tests/study/test_study.py). A study is checked whole when it is built: the schema
cannot see the design relations, the hardware profiles or the trainer keys, so `Study(...)`
resolves the `TrainConfig` of every run and raises `StudyError` naming the file and key of the
first problem, before any job exists.

Each run's trainer config is built from these layers, later ones winning (the only place this
precedence is implemented):

1. the trainer defaults file (`trainer_config`, a `pods train --config` YAML),
2. the hardware profile's `train` (`config/hardware/<hardware>.yaml`),
3. the study's `train`,
4. the benchmark's `train` (`benchmarks.<label>.train`),
5. the hub folders: every hub id in `task_options` (data `source` / `test_source`, a hub task's
   default data, `filter_tokenizer`) replaced by the folder the `fetch_hub` rule writes,
6. the run's identity: benchmark (its `task`), hardware, n, m, rule, seed, base_model (a hub id:
   its fetched folder), run_dir.

Train jobs therefore never download: each hub id is fetched once, at the revision `hub_revisions`
pins, into `{models_dir}/hub/` (pods/training/hub.py), and the jobs wait for it.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import jsonschema
import yaml

from pods.training import hub
from pods.training.config import TrainConfig, parse_value, read_config_file, resolve_train_config
from pods.vocabulary import DESIGNS, Arm, Design, Method, parse_method
from pods.training.warmstart_config import load_warmstart_config
from pods.registry import Registry
from pods.vocabulary import run_path

# Package data (config/schema.yaml links to it): read through importlib.resources, so an
# installed wheel has it too.
SCHEMA = Path(str(resources.files("pods") / "data" / "schema.yaml"))
# Comparison keys that only the analysis reads (the study-file format of pods.study.analysis).
ANALYSIS_KEYS = ("grid_s", "t_max_s", "eval_set", "align", "target_accuracy", "axis")
# Comparison names with a figure of their own (pods.study.plots): `main` (accuracy per design) and the
# paper's ablations; every other name is a family drawn with all its arms (the alternatives).
ABLATIONS = ("n_scaling", "m_scaling", "rule")
PLOT_KINDS = ("accuracy", *ABLATIONS, "length", "step_time")
# m_scaling varies m on purpose, and is read against the baseline's target only.
UNCHECKED_DESIGN = ("m_scaling",)


class StudyError(ValueError):
    """A study config that cannot be run; the message names the file or config key."""


# ---------------------------------------------------------------------------------------------
# Study config files
# ---------------------------------------------------------------------------------------------
def load_schema(path: str | Path = SCHEMA) -> dict:
    """The study schema, with the name lists that registries define filled in as enums (the file
    states none of them): the designs, how curves are aligned, what they are aligned by, how runs launch."""
    from pods.study.curves import ALIGNERS, AXES

    schema = yaml.safe_load(Path(path).read_text())
    definitions = schema["definitions"]
    definitions["comparison"]["properties"]["design"]["enum"] = list(DESIGNS)
    definitions["comparison"]["properties"]["align"]["enum"] = list(ALIGNERS)
    definitions["comparison"]["properties"]["axis"]["enum"] = list(AXES)
    definitions["hardware_profile"]["properties"]["launcher"]["enum"] = list(LAUNCHERS)
    return schema


def schema_default(key: str) -> Any:
    """The schema's default of a top-level study key (for a workflow file run without the Snakefile)."""
    return load_schema()["properties"][key]["default"]


def _with_defaults(validator_class):
    """A validator that also fills in each property's `default` (the jsonschema FAQ recipe; what
    Snakemake's `validate(set_default=True)` does for the study config)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, json.loads(json.dumps(subschema["default"])))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate(instance: Any, schema: Mapping, where: str, definition: str | None = None) -> Any:
    """Check `instance` against the schema (or one of its definitions), filling in defaults in
    place; a failure raises StudyError `where: key.path: message`."""
    if definition is not None:
        schema = {**schema["definitions"][definition], "definitions": schema["definitions"]}
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise StudyError(f"{where}: {key}: {error.message}")
    return instance


def load_study_config(*paths: str | Path, overrides: Mapping | None = None, schema: Mapping | None = None) -> dict:
    """The study config as the workflow sees it: the files merged as `--configfile` merges them
    (nested mappings key by key), then `overrides` (`--config`), validated with defaults filled in."""
    from snakemake.utils import update_config

    config: dict = {}
    for path in paths:
        update_config(config, yaml.safe_load(Path(path).read_text()) or {})
    update_config(config, dict(overrides or {}))
    where = " + ".join([*map(str, paths), *(["--config"] if overrides else [])]) or "study config"
    return validate(config, schema or load_schema(), where)


# ---------------------------------------------------------------------------------------------
# Hardware profiles and launchers
# ---------------------------------------------------------------------------------------------
# profile -> the command that runs `pods <command>` on every process of a run. launcher_prefix and
# launcher_args go in verbatim (not quoted) so that they can use the job's environment
# ($SLURM_JOB_NODELIST, $MASTER_ADDR, ...) for a multi-node rendezvous.
LAUNCHERS: Registry[Callable[["HardwareProfile"], str]] = Registry("launcher", {
    "none": lambda p: "pods",
    "accelerate": lambda p: (
        f"accelerate launch --num_processes {p.num_processes * p.nodes} --num_machines {p.nodes} "
        f"{p.launcher_args} -m pods.cli"
    ),
    "torchrun": lambda p: f"torchrun --nnodes {p.nodes} --nproc_per_node {p.num_processes} {p.launcher_args} -m pods.cli",
    "deepspeed": lambda p: (
        f"deepspeed --num_nodes {p.nodes} --num_gpus {p.num_processes} {p.launcher_args} --module pods.cli"
    ),
})


@dataclass(frozen=True)
class HardwareProfile:
    """`{hardware_dir}/<name>.yaml`; keys, types and defaults are schema.yaml#/definitions/hardware_profile."""

    name: str
    path: Path
    launcher: str
    threads: int
    resources: Mapping[str, int | str]
    num_processes: int
    nodes: int
    launcher_args: str
    launcher_prefix: str
    train: Mapping[str, Any]
    description: str = ""

    @classmethod
    def load(cls, name: str, hardware_dir: str | Path, schema: Mapping) -> "HardwareProfile":
        path = Path(hardware_dir) / f"{name}.yaml"
        if not path.is_file():
            raise StudyError(f"hardware {name!r}: no profile file {path}")
        profile = validate(yaml.safe_load(path.read_text()) or {}, schema, str(path), "hardware_profile")
        return cls(name=name, path=path, **profile)

    def launch_prefix(self) -> str:
        """What goes before `train ...`: the launcher (and its prefix) that starts every process."""
        return " ".join(f"{self.launcher_prefix} {LAUNCHERS[self.launcher](self)}".split())


# ---------------------------------------------------------------------------------------------
# Comparisons and runs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Run:
    """One training run: the four components of its run directory."""

    benchmark: str
    hardware: str
    method: str
    seed: int


@dataclass(frozen=True)
class Comparison:
    """One (comparison, benchmark, hardware, method) row of the study file pods.study.analysis reads."""

    name: str
    design: str
    benchmark: str
    hardware: str
    baseline: str
    method: str
    seeds: tuple[int, ...]
    analysis: Mapping[str, Any] = field(default_factory=dict)  # ANALYSIS_KEYS
    where: str = field(default="", compare=False)  # `comparisons[i].methods[j]`, for error messages

    def row(self) -> dict:
        return dict(name=self.name, design=self.design, benchmark=self.benchmark, hardware=self.hardware,
                    baseline=self.baseline, method=self.method, seeds=list(self.seeds), **self.analysis)

    def runs(self) -> list[Run]:
        return [Run(self.benchmark, self.hardware, method, seed)
                for method in (self.baseline, self.method) for seed in self.seeds]


def format_value(value: Any) -> str:
    """key=value text that the trainer's override parser reads back as YAML: lists in flow style."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")


def format_overrides(overrides: Mapping[str, Any]) -> list[str]:
    return [f"{key}={format_value(value)}" for key, value in overrides.items()]


class Study:
    """A validated study config (the merged config Snakemake validated against config/schema.yaml,
    or `load_study_config`): its paths, runs, trainer configs and commands."""

    def __init__(self, config: Mapping, schema: Mapping | None = None):
        self.config = config
        self.schema = schema or load_schema()
        self.results = config["results_dir"].rstrip("/")
        self.models = config["models_dir"].rstrip("/")
        self.figures = config["figures_dir"].rstrip("/")
        self.runs_dir = f"{self.results}/runs"
        self.logs = f"{self.results}/logs"
        self.summary_csv = f"{self.results}/{config['summary']}"
        self.summary_md = self.summary_csv[: -len(".csv")] + ".md"
        self.study_file = str(Path(self.summary_csv).with_name("study.yaml"))
        self.trainer_config = config["trainer_config"]
        if not Path(self.trainer_config).is_file():
            raise StudyError(f"trainer_config: no file {self.trainer_config}")
        warmstart_config = config["warmstart"].get("config")
        if warmstart_config and not Path(warmstart_config).is_file():
            raise StudyError(f"warmstart.config: no file {warmstart_config}")
        self._profiles: dict[str, HardwareProfile] = {}
        self._trainer_defaults = self._read_trainer_config()
        self.comparisons = self._expand()
        self.runs = list(dict.fromkeys(run for comparison in self.comparisons for run in comparison.runs()))
        self.hardware = sorted({run.hardware for run in self.runs})
        self.train_configs = {run: self.train_config(run) for run in self.runs}
        for label in sorted({run.benchmark for run in self.runs if self.uses_warmstart(run.benchmark)}):
            self.warmstart_config(label)
        for comparison in self.comparisons:
            self._check_design(comparison)

    # ---- paths
    def run_dir(self, run: Run) -> str:
        return run_path(self.runs_dir, **dataclasses.asdict(run))

    def benchmark(self, label: str) -> Mapping:
        return self.config["benchmarks"][label]

    def uses_warmstart(self, label: str) -> bool:
        return self.benchmark(label)["base_model"] == "warmstart"

    def warmstart_dir(self, label: str) -> str:
        return f"{self.models}/{label}/base"

    def warmstart_marker(self, label: str) -> str:
        """Written after the warm start's model folder is saved: its existence means the base is ready."""
        return f"{self.warmstart_dir(label)}/warmstart.json"

    def base_model_dir(self, label: str) -> str:
        if self.uses_warmstart(label):
            return self.warmstart_dir(label)
        base = self.benchmark(label)["base_model"]
        return self.hub_folder("model", base) if hub.is_hub_id(base) else base

    # ---- the hub: fetched once per id, before any train job
    def hub_folder(self, repo_type: str, hub_id: str) -> str:
        return f"{self.models}/hub/{hub.local_name(hub_id, repo_type)}"

    def hub_marker(self, repo_type: str, hub_id: str) -> str:
        """Written last by `pods fetch --out`: its existence means the folder is complete."""
        return f"{self.hub_folder(repo_type, hub_id)}/{hub.ORIGIN}"

    def hub_revision(self, hub_id: str) -> str | None:
        return self.config.get("hub_revisions", {}).get(hub_id)

    def hub_fetch_command(self, repo_type: str, hub_id: str) -> str:
        argv = ["pods", "fetch", hub_id, "--repo-type", repo_type, "--out", self.hub_folder(repo_type, hub_id)]
        revision = self.hub_revision(hub_id)
        return shlex.join(argv + (["--revision", revision] if revision else []))

    def _task_options(self, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> dict:
        options: dict = {}
        for _, layer in layers:
            options = dict(layer.get("task_options", options))
        return options

    def hub_needs(self, run: Run) -> list[tuple[str, str]]:
        """(repo type, hub id) of everything the run reads from the hub."""
        from pods.training.tasks import task_class

        label = run.benchmark
        options = self._task_options(self._config_layers(run))
        needs = []
        if not self.uses_warmstart(label) and hub.is_hub_id(self.benchmark(label)["base_model"]):
            needs.append(("model", self.benchmark(label)["base_model"]))
        if hub.is_hub_id(options.get("filter_tokenizer")):
            needs.append(("model", options["filter_tokenizer"]))
        try:
            datasets = task_class(self.benchmark(label).get("task", label)).hub_datasets(options)
        except ValueError as exc:
            raise StudyError(f"benchmarks.{label}.task: {exc}") from None
        needs += [("dataset", hub_id) for hub_id in datasets.values()]
        return list(dict.fromkeys(needs))

    def hub_fetches(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys(need for run in self.runs for need in self.hub_needs(run)))

    def base_model_marker(self, label: str) -> str | None:
        """The file whose existence means the benchmark's base model is ready when the workflow
        builds it: a warm start, or any folder under models_dir that another rule writes (e.g. the
        SmolLM2 conversion), or a hub id's fetched folder (`hub.json`). None for a folder outside
        models_dir, which the trainer reads as it is."""
        if self.uses_warmstart(label):
            return self.warmstart_marker(label)
        path = self.benchmark(label)["base_model"].rstrip("/")
        if hub.is_hub_id(path):
            return self.hub_marker("model", path)
        return f"{path}/config.json" if path.startswith(self.models + "/") else None

    # ---- hardware
    def profile(self, name: str) -> HardwareProfile:
        if name not in self._profiles:
            self._profiles[name] = HardwareProfile.load(name, self.config["hardware_dir"], self.schema)
        return self._profiles[name]

    def train_priority(self, run: Run) -> int:
        """The train job's Snakemake priority: its place in a permutation of the study's runs
        drawn from `schedule_seed`. Jobs that run side by side slow each other's clocks; in the
        order the study lists them, the same arms would always share the machine (GRPO-GA beside
        PODS, say), a wall-clock effect no seed bootstrap sees. A seeded shuffle spreads it over
        the arms, and the seed in the config records the order."""
        import random

        order = list(self.runs)
        random.Random(self.config.get("schedule_seed", 0)).shuffle(order)
        return len(order) - order.index(run)

    def resource_names(self) -> list[str]:
        """Every scheduler resource some profile of this study asks for (a rule's resource names
        are fixed when the workflow is parsed; a profile that lacks one asks for 0 of it)."""
        return sorted({name for hw in self.hardware for name in self.profile(hw).resources})

    def resource(self, hardware: str, name: str) -> int | str:
        return self.profile(hardware).resources.get(name, 0)

    # ---- expansion
    def _expand(self) -> list[Comparison]:
        from pods.selection import SELECTION_RULES  # torch: the study's runs are resolved, not just read

        rows = []
        for i, comp in enumerate(self.config["comparisons"]):
            where = f"comparisons[{i}]"
            if comp["baseline"] in comp["methods"]:
                raise StudyError(f"{where}.methods: {comp['baseline']!r} is also the baseline; a run is not "
                                 f"compared with itself")
            for key, method in [("baseline", comp["baseline"]), *((f"methods[{j}]", m) for j, m in enumerate(comp["methods"]))]:
                try:  # the form here, the rule in the selection registry (the schema spells no rule names)
                    SELECTION_RULES[parse_method(method).rule]
                except ValueError as exc:
                    raise StudyError(f"{where}.{key}: {exc}") from None
            seeds = comp.get("seeds", self.config["seeds"])
            seeds = tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds)  # a count N: 0 .. N-1
            for label in comp["benchmarks"]:
                if label not in self.config["benchmarks"]:
                    raise StudyError(f"{where}.benchmarks: {label!r} is not declared under `benchmarks`")
            for label in comp["hardware"]:
                try:
                    self.profile(label)
                except StudyError as exc:
                    raise StudyError(f"{where}.hardware: {exc}") from None
            analysis = {key: comp[key] for key in ANALYSIS_KEYS if key in comp}

            def for_benchmark(label: str) -> dict:
                # a benchmark's fixed quality target applies to its comparisons unless one sets its own
                target = self.config["benchmarks"][label].get("target_accuracy")
                return {**({"target_accuracy": target} if target is not None else {}), **analysis}

            rows += [Comparison(comp["name"], comp["design"], benchmark, hardware, comp["baseline"], method,
                                seeds, for_benchmark(benchmark), where=f"{where}.methods[{j}]")
                     for benchmark in comp["benchmarks"] for hardware in comp["hardware"]
                     for j, method in enumerate(comp["methods"])]
        return rows

    def _check_design(self, comparison: Comparison) -> None:
        """The paper's two designs fix what the arms share (docs/paper.md 2.1.6 and 2.2)."""
        if comparison.name in UNCHECKED_DESIGN:
            return
        baseline, method = (Arm(parse_method(name), self.rollouts_per_prompt(
                                Run(comparison.benchmark, comparison.hardware, name, comparison.seeds[0])))
                            for name in (comparison.baseline, comparison.method))
        problem = Design(comparison.design).violation(baseline, method)
        if problem:
            raise StudyError(f"{comparison.where} on {comparison.benchmark}/{comparison.hardware}: {problem}")

    def rollouts_per_prompt(self, run: Run) -> int:
        """Rollouts the run generates per prompt, as its trainer resolves them (`rollouts_per_prompt:
        null` is one group of n)."""
        cfg = self.train_configs[run]
        return cfg.groups_per_prompt * cfg.n

    # ---- the trainer
    def _read_trainer_config(self) -> dict:
        try:
            return read_config_file(self.trainer_config)
        except ValueError as exc:
            raise StudyError(f"trainer_config: {exc}") from None

    def _config_layers(self, run: Run) -> list[tuple[str, Mapping[str, Any]]]:
        return [
            (str(self.trainer_config), self._trainer_defaults),
            (f"{self.profile(run.hardware).path} train", self.profile(run.hardware).train),
            ("the study's train", self.config.get("train", {})),
            (f"benchmarks.{run.benchmark}.train", self.benchmark(run.benchmark).get("train", {})),
        ]

    def train_layers(self, run: Run) -> list[tuple[str, Mapping[str, Any]]]:
        """The layers of the module docstring, each with where it comes from."""
        method: Method = parse_method(run.method)
        bench = self.benchmark(run.benchmark)
        layers = self._config_layers(run)
        options = self._task_options(layers)
        fetched = {hub_id: self.hub_folder(kind, hub_id) for kind, hub_id in self.hub_needs(run)}
        local = {key: fetched.get(value, value) if isinstance(value, str) else value for key, value in options.items()}
        from pods.training.tasks import task_class

        for key, hub_id in task_class(bench.get("task", run.benchmark)).hub_datasets(options).items():
            local[key] = fetched[hub_id]  # a hub task's default data, now named
        if local != options:
            layers.append((f"the hub folders under {self.models}/hub", {"task_options": local}))
        identity = dict(
            benchmark=bench.get("task", run.benchmark), hardware=run.hardware, n=method.n, m=method.m,
            rule=method.rule, seed=int(run.seed), base_model=self.base_model_dir(run.benchmark),
            run_dir=self.run_dir(run),
        )
        if method.dynamic:  # `dapo-...`: DAPO's dynamic sampling, part of the run's identity
            identity["dynamic_sampling"] = True
        return [*layers, (f"the identity of run {self.run_dir(run)}", identity)]

    def train_overrides(self, run: Run) -> dict[str, Any]:
        """Every key the run's trainer gets on the command line, on top of the defaults file."""
        overrides: dict[str, Any] = {}
        for _, layer in self.train_layers(run)[1:]:
            overrides.update(layer)
        return overrides

    def train_config(self, run: Run) -> TrainConfig:
        """The run's TrainConfig exactly as `pods train` will resolve it; StudyError names the layer."""
        defaults, *command_line = self.train_layers(run)
        # the trainer reads every layer but the defaults file back from its command line
        command_line = [(where, {key: parse_value(format_value(value)) for key, value in layer.items()})
                        for where, layer in command_line]
        try:
            cfg = resolve_train_config([defaults, *command_line])
        except ValueError as exc:
            raise StudyError(str(exc)) from None
        if cfg.method != run.method:  # a layer set what the method name decides (dynamic_sampling)
            raise StudyError(f"run {self.run_dir(run)}: its layers make it {cfg.method!r}, not {run.method!r}; "
                             "the method name decides rule, n, m and dynamic sampling (dapo-...)")
        return cfg

    def train_command(self, run: Run) -> str:
        argv = ["train", "--config", self.trainer_config, *format_overrides(self.train_overrides(run))]
        return f"{self.profile(run.hardware).launch_prefix()} {shlex.join(argv)}"

    def warmstart_overrides(self, label: str) -> dict[str, Any]:
        """The study's warm-start overrides, then the benchmark's, then what the workflow sets."""
        return {
            **self.config["warmstart"].get("overrides", {}),
            **self.benchmark(label).get("warmstart", {}),
            "benchmark": self.benchmark(label).get("task", label),
            "out_dir": self.warmstart_dir(label),
        }

    def warmstart_config(self, label: str):
        """The benchmark's WarmStartConfig as `pods warmstart` will resolve it from its command."""
        try:
            return load_warmstart_config(self.config["warmstart"].get("config"), format_overrides(self.warmstart_overrides(label)))
        except (ValueError, FileNotFoundError) as exc:
            raise StudyError(f"the warm start of benchmark {label!r} (warmstart.overrides, "
                             f"benchmarks.{label}.warmstart): {exc}") from None

    def warmstart_command(self, label: str) -> str:
        warmstart = self.config["warmstart"]
        config_args = ["--config", warmstart["config"]] if warmstart.get("config") else []
        return shlex.join(["pods", "warmstart", *config_args, *format_overrides(self.warmstart_overrides(label))])

    # ---- what is on disk
    def summaries(self) -> dict[str, dict]:
        """Run directory -> its summary.json ({} before it started or when unreadable): `running`
        mid-run, `complete` once the trainer finished, `failed` after a non-finite number."""
        out = {}
        for run in self.runs:
            path = Path(self.run_dir(run), "summary.json")
            try:
                record = json.loads(path.read_text()) if path.exists() else {}
            except ValueError:
                record = {}
            out[self.run_dir(run)] = record if isinstance(record, dict) else {}
        return out

    def study_rows(self) -> list[dict]:
        return [comparison.row() for comparison in self.comparisons]


def run_from(wildcards: Any) -> Run:
    """The Run of a train job's wildcards."""
    return Run(wildcards.benchmark, wildcards.hardware, wildcards.method, int(wildcards.seed))

