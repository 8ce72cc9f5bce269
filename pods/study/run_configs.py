"""Each run's trainer config, resolved once from its layers, later ones winning (the only place this
precedence is implemented):

1. the trainer defaults file (`trainer_config`, a `pods train --config` YAML),
2. the hardware profile's `train` (`config/hardware/<hardware>.yaml`),
3. the study's `train`,
4. the benchmark's `train` (`benchmarks.<label>.train`),
5. the hub folders: every hub id in `task_options` (data `source` / `test_source`, a hub task's
   default data, `filter_tokenizer`) replaced by the folder the `fetch_hub` rule writes,
6. the run's identity: benchmark (its `task`), hardware, n, m, rule, seed, base_model (a hub id:
   its fetched folder), run_dir.

The train job gets layer 1 as its `--config` file and layers 2-6, merged, as `key=value` overrides
(`RunConfig.overrides`); every value is written so that the trainer reads it back as it is
(`format_value`), so the config resolved here is the one the job checks and runs.

Train jobs therefore never download: each hub id is fetched once, at the revision `hub_revisions`
pins, into `{models_dir}/hub/` (pods/training/hub.py), and the jobs wait for it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import yaml

from pods.study.expansion import Run
from pods.study.hardware import HardwareProfile
from pods.study.paths import StudyPaths
from pods.study.schema import StudyError
from pods.training import hub
from pods.training.config import TrainConfig, parse_value, read_config_file, resolve_train_config, variant_settings
from pods.training.warmstart_config import load_warmstart_config
from pods.vocabulary import Arm, method_for, parse_method

Layers = list[tuple[str, Mapping[str, Any]]]  # (where it comes from, its values), in precedence order


def format_value(value: Any) -> str:
    """key=value text that the trainer's override parser reads back as `value`: lists and mappings
    in flow style, a string as it is unless YAML would read it as something else (`null`, `yes`)."""
    if isinstance(value, str) and parse_value(value) == value:
        return value
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...")


def format_overrides(overrides: Mapping[str, Any]) -> list[str]:
    return [f"{key}={format_value(value)}" for key, value in overrides.items()]


@dataclass(frozen=True)
class RunConfig:
    """One run's trainer config: the layers it is built from, what it reads from the hub, and the
    resolved, checked `TrainConfig` its job runs."""

    layers: Layers
    hub_needs: list[tuple[str, str]]  # (repo type, hub id) of everything the run reads from the hub
    config: TrainConfig

    @property
    def overrides(self) -> dict[str, Any]:
        """Every key the run's trainer gets on the command line, on top of the defaults file."""
        merged: dict[str, Any] = {}
        for _, layer in self.layers[1:]:
            merged.update(layer)
        return merged

    @property
    def arm(self) -> Arm:
        """The run as an arm of a comparison: its method, and the rollouts it generates per prompt
        (`rollouts_per_prompt: null` is one group of n)."""
        cfg = self.config
        return Arm(method_for(cfg.n, cfg.m, cfg.rule, cfg.dynamic_sampling, cfg.variant), cfg.groups_per_prompt * cfg.n)


class RunConfigs:
    """Builds each run's `RunConfig` from a validated study config."""

    def __init__(self, config: Mapping, paths: StudyPaths, profile: Callable[[str], HardwareProfile]):
        self.config, self.paths, self.profile = config, paths, profile
        self.trainer_config = config["trainer_config"]
        try:
            self.trainer_defaults = read_config_file(self.trainer_config)
        except FileNotFoundError:
            raise StudyError(f"trainer_config: no file {self.trainer_config}") from None
        except ValueError as exc:
            raise StudyError(f"trainer_config: {exc}") from None

    def build(self, run: Run) -> RunConfig:
        """The run's config exactly as `pods train` resolves it from its command; StudyError names the layer."""
        method = parse_method(run.method)
        bench = self.config["benchmarks"][run.benchmark]
        layers = [
            (str(self.trainer_config), self.trainer_defaults),
            (f"{self.profile(run.hardware).path} train", self.profile(run.hardware).train),
            ("the study's train", self.config.get("train", {})),
            (f"benchmarks.{run.benchmark}.train", bench.get("train", {})),
        ]
        needs, hub_folders = self._hub(run, layers)
        if hub_folders:
            layers.append((f"the hub folders under {self.paths.models}/hub", {"task_options": hub_folders}))
        identity = dict(
            benchmark=bench.get("task", run.benchmark), hardware=run.hardware, n=method.n, m=method.m,
            rule=method.rule, seed=int(run.seed), base_model=self.paths.base_model_dir(run.benchmark),
            run_dir=self.paths.run_dir(run), hardware_dir=self.config["hardware_dir"],
        )
        if method.dynamic:  # `dapo-...`, `greso-...`: DAPO's dynamic sampling, part of the run's identity
            identity["dynamic_sampling"] = True
        identity.update(variant_settings(method))  # `cppo-...`, `greso-...`: theirs (nothing for the others)
        if self.config.get("clock") == "cost":  # budgets in steps of the arm's measured cost
            identity["step_cost_file"] = self.paths.step_cost_file(run.benchmark, run.hardware)
        layers.append((f"the identity of run {self.paths.run_dir(run)}", identity))
        try:
            config = resolve_train_config(layers)
        except ValueError as exc:
            raise StudyError(str(exc)) from None
        if config.dynamic_sampling != method.dynamic:  # a layer set what the method name decides
            raise StudyError(f"run {self.paths.run_dir(run)}: a layer sets dynamic_sampling, which the method name "
                             f"{run.method!r} decides (dapo-...)")
        for key, prefix in (("completion_allocation", "cppo"), ("pre_rollout_filter", "greso")):
            if getattr(config, key) != (method.variant == prefix):
                raise StudyError(f"run {self.paths.run_dir(run)}: a layer sets {key}, which the method name "
                                 f"{run.method!r} decides ({prefix}-...)")
        return RunConfig(layers, needs, config)

    def _hub(self, run: Run, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[list, dict | None]:
        """What the run reads from the hub, and its task_options with every hub id replaced by the
        fetched folder (None when there is none to replace)."""
        from pods.training.tasks import task_class

        label, bench = run.benchmark, self.config["benchmarks"][run.benchmark]
        options: dict = {}
        for _, layer in layers:
            options = dict(layer.get("task_options", options))
        needs = []
        if not self.paths.uses_warmstart(label) and hub.is_hub_id(bench["base_model"]):
            needs.append(("model", bench["base_model"]))
        if hub.is_hub_id(options.get("filter_tokenizer")):
            needs.append(("model", options["filter_tokenizer"]))
        try:
            datasets = task_class(bench.get("task", label)).hub_datasets(options)
        except ValueError as exc:
            raise StudyError(f"benchmarks.{label}.task: {exc}") from None
        needs = list(dict.fromkeys(needs + [("dataset", hub_id) for hub_id in datasets.values()]))
        fetched = {hub_id: self.paths.hub_folder(kind, hub_id) for kind, hub_id in needs}
        local = {key: fetched.get(value, value) if isinstance(value, str) else value for key, value in options.items()}
        for key, hub_id in datasets.items():
            local[key] = fetched[hub_id]  # a hub task's default data, now named
        return needs, (local if local != options else None)

    # ---- the warm start of a benchmark whose base model is `warmstart`
    def warmstart_overrides(self, label: str) -> dict[str, Any]:
        """The study's warm-start overrides, then the benchmark's, then what the workflow sets."""
        return {
            **self.config["warmstart"].get("overrides", {}),
            **self.config["benchmarks"][label].get("warmstart", {}),
            "benchmark": self.config["benchmarks"][label].get("task", label),
            "out_dir": self.paths.warmstart_dir(label),
        }

    def warmstart_config(self, label: str):
        """The benchmark's WarmStartConfig as `pods warmstart` will resolve it from its command."""
        try:
            return load_warmstart_config(self.config["warmstart"].get("config"),
                                         format_overrides(self.warmstart_overrides(label)))
        except (ValueError, FileNotFoundError) as exc:
            raise StudyError(f"the warm start of benchmark {label!r} (warmstart.overrides, "
                             f"benchmarks.{label}.warmstart): {exc}") from None
