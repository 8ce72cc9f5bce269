"""A study: its comparisons expanded into runs, every run's trainer config resolved and checked once,
and the paths and commands of the jobs that build and train them.

The Snakemake workflow is a thin layer over this module (`workflows/common.smk` builds one `Study`
from the merged, schema-validated config and its rules call it), so everything here is unit-tested
without Snakemake (tests/study/test_study.py). A study is checked whole when it is built: the schema
cannot see the design relations, the hardware profiles or the trainer keys, so `Study(...)`
resolves the `TrainConfig` of every run and raises `StudyError` naming the file and key of the
first problem, before any job exists.

The parts, each readable alone: `pods.study.schema` (the config files), `pods.study.expansion`
(comparisons into runs), `pods.study.run_configs` (each run's layered trainer config),
`pods.study.paths` (where everything lives) and `pods.study.hardware` (profiles and launchers).
"""
from __future__ import annotations

import random
import shlex
from collections.abc import Mapping
from pathlib import Path

import yaml

from pods.runs import RunFileError, read_summary
from pods.study.expansion import Comparison, Run, check_design, expand
from pods.study.hardware import HardwareProfile
from pods.study.paths import StudyPaths
from pods.study.run_configs import RunConfig, RunConfigs, format_overrides
from pods.study.schema import PROTOCOL_FILE, PROTOCOL_KEYS, StudyError, load_schema, validate
from pods.training.config import variant_settings
from pods.vocabulary import parse_method


def summary_or_empty(run_dir: str) -> dict:
    """A run directory's summary.json, {} before the run started or when it is unreadable."""
    try:
        return read_summary(run_dir)
    except RunFileError:
        return {}


def check_protocol(config: Mapping, protocol_file: Path = PROTOCOL_FILE) -> None:
    """A study that keeps the protocol's name (config/protocol.yaml) trains and times its runs as
    the protocol says: the same trainer, kernels, clock and budget (`train` exactly the protocol's),
    the protocol's step costs or costs of its own measured the same way (`step_costs: null`, for arms
    the protocol's file lacks), and its comparisons paired by seed. One that needs another protocol names its own
    (`protocol: ...`). Checked before any job exists."""
    if not protocol_file.is_file():
        return
    protocol = yaml.safe_load(protocol_file.read_text()) or {}
    if config.get("protocol") != protocol.get("protocol"):
        return
    name = protocol["protocol"]
    for key in PROTOCOL_KEYS:
        if key == "step_costs" and config.get(key) is None:
            continue  # arms the protocol's cost file lacks: all of the study's measured alone, as it was
        if key in protocol and config.get(key) != protocol[key]:
            raise StudyError(f"{key}: {config.get(key)!r} is not protocol {name}'s {protocol[key]!r} "
                             f"({protocol_file}); a study on another protocol names it: protocol: <its name>, "
                             "with a results_dir of its own")
    for comparison in config.get("comparisons", []):
        if comparison.get("pairing", "seed") != "seed":
            raise StudyError(f"comparisons: {comparison.get('name')}: protocol {name} pairs arms by seed; "
                             f"an unpaired study names another protocol")


class Study:
    """A validated study config (the merged config Snakemake validated against config/schema.yaml,
    or `load_study_config`): its runs, each run's config, and the commands of its jobs."""

    def __init__(self, config: Mapping, schema: Mapping | None = None):
        self.config = config
        self.schema = schema or load_schema()
        self.paths = StudyPaths(config)
        self.trainer_config = config["trainer_config"]
        if not Path(self.trainer_config).is_file():
            raise StudyError(f"trainer_config: no file {self.trainer_config}")
        warmstart_config = config["warmstart"].get("config")
        if warmstart_config and not Path(warmstart_config).is_file():
            raise StudyError(f"warmstart.config: no file {warmstart_config}")
        self._profiles: dict[str, HardwareProfile] = {}
        self.configs = RunConfigs(config, self.paths, self.profile)
        self.comparisons: list[Comparison] = expand(config, self.profile)
        self.runs: list[Run] = list(dict.fromkeys(run for comparison in self.comparisons for run in comparison.runs()))
        self.hardware = sorted({run.hardware for run in self.runs})
        self.run_configs: dict[Run, RunConfig] = {run: self.configs.build(run) for run in self.runs}
        for label in sorted({run.benchmark for run in self.runs if self.paths.uses_warmstart(run.benchmark)}):
            self.configs.warmstart_config(label)
        for comparison in self.comparisons:
            check_design(comparison, lambda run: self.run_configs[run].arm)
        check_protocol(config)  # after every key is known to exist: a typo is named as a typo first
        if config.get("clock") == "cost":
            for hw in self.hardware:
                if self.profile(hw).launcher != "none":
                    raise StudyError(f"clock: cost measures step costs in one process, but hardware {hw!r} starts its "
                                     f"runs with {self.profile(hw).launcher}; use clock: time there")

    def profile(self, name: str) -> HardwareProfile:
        """The hardware profile `{hardware_dir}/<name>.yaml`, read and checked once."""
        if name not in self._profiles:
            path = Path(self.config["hardware_dir"]) / f"{name}.yaml"
            if not path.is_file():
                raise StudyError(f"hardware {name!r}: no profile file {path}")
            profile = validate(yaml.safe_load(path.read_text()) or {}, self.schema, str(path), "hardware_profile")
            self._profiles[name] = HardwareProfile(name=name, path=path, **profile)
        return self._profiles[name]

    def run_config(self, run: Run) -> RunConfig:
        """The run's config: resolved when the study was built (a run outside the study, built now)."""
        return self.run_configs[run] if run in self.run_configs else self.configs.build(run)

    # ---- the jobs' commands
    def train_command(self, run: Run) -> str:
        argv = ["train", "--config", self.trainer_config, *format_overrides(self.run_config(run).overrides)]
        return f"{self.profile(run.hardware).launch_prefix()} {shlex.join(argv)}"

    # keys of a run's overrides that belong to one run, not to the arms of a cost measurement
    RUN_ONLY = ("n", "m", "rule", "seed", "run_dir", "dynamic_sampling", "step_cost_file")

    def cost_groups(self) -> dict[tuple[str, str], list[str]]:
        """(benchmark, hardware) -> the study's methods there: one `step_cost` job each."""
        groups: dict[tuple[str, str], list[str]] = {}
        for run in self.runs:
            methods = groups.setdefault((run.benchmark, run.hardware), [])
            if run.method not in methods:
                methods.append(run.method)
        return groups

    def step_cost_command(self, benchmark: str, hardware: str) -> str:
        """`pods cost` for every method the study trains on this benchmark and hardware, with the
        settings its runs share (their overrides less what belongs to one run)."""
        methods = self.cost_groups()[(benchmark, hardware)]
        first = next(run for run in self.runs if (run.benchmark, run.hardware) == (benchmark, hardware))
        decided = variant_settings(parse_method(first.method))  # a cppo- or greso- run's own keys
        shared = {k: v for k, v in self.run_config(first).overrides.items()
                  if k not in self.RUN_ONLY and k not in decided}
        argv = ["cost", "--no-progress", "--config", self.trainer_config, *format_overrides(shared),
                "--methods", ",".join(methods), "--out", self.paths.step_cost_file(benchmark, hardware)]
        return f"{self.profile(hardware).launch_prefix()} {shlex.join(argv)}"

    def warmstart_command(self, label: str) -> str:
        warmstart = self.config["warmstart"]
        config_args = ["--config", warmstart["config"]] if warmstart.get("config") else []
        return shlex.join(["pods", "warmstart", *config_args,
                           *format_overrides(self.configs.warmstart_overrides(label))])

    def hub_fetches(self) -> list[tuple[str, str]]:
        """(repo type, hub id) of everything the study's runs read from the hub, once each."""
        return list(dict.fromkeys(need for run in self.runs for need in self.run_configs[run].hub_needs))

    def hub_fetch_command(self, repo_type: str, hub_id: str) -> str:
        argv = ["pods", "fetch", hub_id, "--repo-type", repo_type, "--out", self.paths.hub_folder(repo_type, hub_id)]
        revision = self.config.get("hub_revisions", {}).get(hub_id)
        return shlex.join(argv + (["--revision", revision] if revision else []))

    # ---- scheduling
    def train_priority(self, run: Run) -> int:
        """The train job's Snakemake priority: a uniform draw seeded by `schedule_seed` and the
        run, so the jobs start in a seeded shuffle. Jobs that run side by side slow each other's
        clocks; in the order the study lists them, the same arms would always share the machine
        (GRPO-GA beside PODS, say), a wall-clock effect no seed bootstrap sees. A draw per run (not
        a place in the study's list) also orders runs the study does not list: a confirmation's
        later batches (config `confirmation`) train seeds added after the study was built."""
        return random.Random(f"{self.config.get('schedule_seed', 0)}:{run}").randrange(1 << 30)

    def resource_names(self) -> list[str]:
        """Every scheduler resource some profile of this study asks for (a rule's resource names
        are fixed when the workflow is parsed; a profile that lacks one asks for 0 of it)."""
        return sorted({name for hw in self.hardware for name in self.profile(hw).resources})

    def resource(self, hardware: str, name: str) -> int | str:
        return self.profile(hardware).resources.get(name, 0)

    # ---- what is on disk
    def summaries(self) -> dict[str, dict]:
        """Run directory -> its summary.json ({} before it started or when unreadable): `running`
        mid-run, `complete` once the trainer finished, `failed` after a non-finite number."""
        return {self.paths.run_dir(run): summary_or_empty(self.paths.run_dir(run)) for run in self.runs}

    def study_rows(self) -> list[dict]:
        return [comparison.row() for comparison in self.comparisons]
