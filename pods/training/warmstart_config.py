"""The warm start's configuration: `WarmStartConfig`, its tuned lengths and its loader.

Apart from pods.training.warmstart (which needs torch and transformers) because a study reads it for
every embedded benchmark whenever the workflow is parsed, on every node.
"""
from __future__ import annotations

import ast
import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from pods.training.config import check_field_name, coerce_field, parse_overrides

WARMSTART_WORD = "warmstart key"

# The CPU kernel path (torch's ATEN_CPU_CAPABILITY) of the embedded bases. float32 training is
# bit-exact on one kernel path of one kind of CPU only, and the committed runs' bases were built on
# AVX2 kernels. The workflow exports the study's `aten_cpu_capability` (config/config.yaml: this
# one) to every job; `pods warmstart` run by hand takes this one unless ATEN_CPU_CAPABILITY is set.
CPU_KERNELS = "avx2"
KERNELS_VARIABLE = "ATEN_CPU_CAPABILITY"


# Warm-start length per benchmark, chosen so the base model's greedy test accuracy lands in the
# 10-40% range where RL has room to rise (measurements: docs/embedded-default.md).
TUNED = {
    "arith": {"steps": 500, "lr_schedule": "constant"},
    "arith_hard": {"steps": 1600, "lr_schedule": "constant"},
}
FALLBACK = {"steps": 1000, "lr_schedule": "cosine"}


@dataclass
class WarmStartConfig:
    """Supervised warm start of the tiny policy. Every field can be set in the YAML or as key=value."""

    # ---- what and where
    benchmark: str = "arith"
    """Embedded benchmark whose worked examples are learned (a key of `pods.training.tasks.TASKS`)."""
    seed: int = 0
    """Seeds the initial weights, the training split and the data order."""
    out_dir: str = "models/{benchmark}/base"
    """Output model folder; `{benchmark}` and `{seed}` are filled in."""

    # ---- model (see `pods.training.models.build_tiny_policy`)
    arch: str = "gpt2"
    """"gpt2" or "llama"; GPT-2 is the faster of the two on one CPU thread at this size."""
    n_layer: int = 4
    d_model: int = 128
    n_head: int = 4
    max_len: int = 64
    """Longest prompt + completion in tokens (the embedded tasks need under 40)."""

    # ---- optimisation
    steps: int | None = None
    """Optimiser steps (the run is defined by steps, not time, so it is reproducible); null: the
    benchmark's tuned value in `TUNED`."""
    batch_size: int = 64
    lr: float = 2e-3
    """Peak learning rate, reached after `warmup_steps` of linear warmup."""
    lr_schedule: str | None = None
    """After warmup: "constant", or "cosine" decay to zero at `steps` (a much sharper model for the
    same steps); null: the benchmark's tuned value in `TUNED`."""
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    error_rate: float = 0.35
    """Share of training targets with one wrong partial sum (and so a wrong answer): RL headroom."""
    num_threads: int = 1

    # ---- evaluation of the result
    eval_items: int = 1000
    """Test items for greedy accuracy (the whole fixed test split by default)."""
    pass_items: int = 200
    """Test items for sampled pass@k."""
    pass_samples: int = 16
    """Samples per item for pass@k; pass@1, 2, 4, ... up to this are reported (unbiased estimator)."""
    temperature: float = 1.0
    """Sampling temperature of pass@k: the RL default, so pass@k says what RL can find."""
    max_new_tokens: int = 32
    eval_batch: int = 512

    def validate(self) -> None:
        from pods.training.tasks import TASKS

        if self.benchmark not in TASKS:
            raise ValueError(f"benchmark: unknown {self.benchmark!r}; known: {', '.join(sorted(TASKS))}")
        for key, value in TUNED.get(self.benchmark, FALLBACK).items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        for key in ("steps", "batch_size", "eval_items", "pass_items", "pass_samples", "max_new_tokens",
                    "eval_batch", "num_threads", "n_layer", "d_model", "n_head", "max_len"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be >= 1, got {getattr(self, key)}")
        if not 0.0 <= self.error_rate < 1.0:
            raise ValueError(f"error_rate: must be in [0, 1), got {self.error_rate}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule: must be constant or cosine, got {self.lr_schedule!r}")
        if self.lr <= 0 or self.temperature <= 0:
            raise ValueError("lr and temperature must be > 0")


def load_warmstart_config(path: str | None, overrides: list[str]) -> WarmStartConfig:
    """YAML file (optional) then `key=value` overrides, read and checked by the same code as the
    trainer's: unknown keys name the closest one, `1e-3` is a float."""
    import yaml

    fields = {f.name: f for f in dataclasses.fields(WarmStartConfig)}
    values: dict = {}
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        for key in loaded:
            check_field_name(fields, str(key), path, WARMSTART_WORD)
        values.update(loaded)
    values.update(parse_overrides(list(overrides), fields, WARMSTART_WORD))
    config = WarmStartConfig(**{key: coerce_field(fields, key, value, WARMSTART_WORD) for key, value in values.items()})
    config.validate()
    return config


def base_differences(record: dict, expected: WarmStartConfig, cpu_kernels: str | None) -> list[str]:
    """How a base's warmstart.json differs from the warm start `expected` builds on `cpu_kernels`:
    `steps=600, not 500` per recipe key (where it is written aside), and the CPU kernel path when
    both are known; [] when it is that base."""
    recorded = record.get("config") or {}
    differences = [f"{key}={recorded.get(key)!r}, not {value!r}" for key, value in dataclasses.asdict(expected).items()
                   if key != "out_dir" and recorded.get(key) != value]
    built_on = (record.get("environment") or {}).get("cpu_capability")
    if cpu_kernels and built_on and built_on.lower() != cpu_kernels.lower():
        differences.append(f"CPU kernels {built_on}, not {cpu_kernels.upper()}")
    return differences


def warmstart_command(overrides: list[str], config: str | None = None, cpu_kernels: str | None = CPU_KERNELS) -> str:
    """The command line that builds a base as the workflow's `warmstart` rule does."""
    argv = ["pods", "warmstart", *(["--config", config] if config else []), *overrides]
    return (f"{KERNELS_VARIABLE}={cpu_kernels} " if cpu_kernels else "") + shlex.join(argv)


# ------------------------------------------------------------------------------ the code it runs
def code_files(modules: tuple[str, ...] = ("pods.cli", "pods.training.warmstart_cli")) -> list[Path]:
    """Every file of the package that `modules` (`pods warmstart`) import, directly or through
    others, anywhere in a body (a function-level import runs too): the warm start's code inputs in
    the workflow, so that a change to any of them builds the base again. Read from the source,
    nothing imported."""
    package = Path(__file__).resolve().parents[1]  # the pods folder

    def file_of(name: str) -> Path | None:
        path = package.parent.joinpath(*name.split("."))
        if path.is_dir():
            return path / "__init__.py"
        return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None

    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        while name and file_of(name) is None:  # `from pods.x import name` where name is not a module
            name = name.rpartition(".")[0]
        if not name or name in seen:
            continue
        path = seen[name] = file_of(name)
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]  # its packages' __init__s run first
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == package.name]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.split(".")[0] == package.name:
                    todo += [base, *(f"{base}.{a.name}" for a in node.names)]
    return sorted(seen.values())
