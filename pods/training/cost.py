"""`pods cost`: each arm's seconds per optimiser step on this machine, by an interleaved benchmark.

The learning side of a study is a function of the seed (a run trains to a number of steps); the
clock side is this measurement: the arms' steps in alternating rounds (arm A, arm B, arm C, then
again), each round a short real run of `pods.training.trainer.train` from the base model with
`warmup` untimed and `steps` timed steps, all in one process and one thread, so that every arm
sees the same machine. An arm's cost c is the mean of its timed steps' `step_s`; its standard
error comes from the rounds' means (rounds are the replicates: what drifts between them, such as
another process starting, is what the error should carry). docs/verdict.md, "The clock".

    pods cost --config config/train-cpu.yaml benchmark=arith base_model=models/arith/base \\
              --methods grpo-n16-m16,pods-max_variance-n64-m16,grpo-n64-m64 --out cost.json

The output (a JSON object) is what `TrainConfig.step_cost_file` and the analysis's cost clock read:
`{"methods": {name: {"s_per_step", "se", "round_means", "phase_s_per_step"}}, "settings": ...}`.
Run it on a machine doing nothing else: the workflow's `step_cost` rule takes every core.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Sequence

from pods.atomic import atomic_write_text
from pods.runs import read_jsonl
from pods.training.cost_clock import read_step_costs  # noqa: F401  (the file's reader, beside its writer)
from pods.training.timing import STEP_PHASES
from pods.vocabulary import parse_method


def measure(base: dict, methods: Sequence[str], rounds: int = 4, steps: int = 6, warmup: int = 2,
            progress: bool = True) -> dict:
    """Per method: seconds per step (mean of the timed steps), its standard error over the rounds'
    means, the rounds' means and the phase means. `base`: TrainConfig keys shared by every arm."""
    import torch
    from tqdm import tqdm

    from pods.training.config import load_train_config, variant_settings
    from pods.training.trainer import train

    if rounds < 2 or steps < 1 or warmup < 0:
        raise ValueError(f"pods cost needs rounds >= 2, steps >= 1, warmup >= 0; got {rounds}, {steps}, {warmup}")
    parsed = {name: parse_method(name) for name in methods}   # a bad name stops here, before any compute
    torch.set_num_threads(1)
    timed: dict[str, list[list[dict]]] = {name: [] for name in methods}
    with tempfile.TemporaryDirectory() as tmp:
        configs = {name: load_train_config(None, {
            **base, "n": m.n, "m": m.m, "rule": m.rule, "dynamic_sampling": m.dynamic, **variant_settings(m),
            "run_dir": str(Path(tmp) / name), "max_steps": warmup + steps, "max_train_time_s": None,
            "eval_every_s": None, "eval_every_steps": None, "checkpoint_every_s": 1e9, "report_to": [],
            "eval_items": 8,   # the start and end evaluations are off the clock; keep them short
        }) for name, m in parsed.items()}
        bar = tqdm(total=rounds * len(methods), desc="step cost", disable=not progress)
        for _ in range(rounds):
            for name, cfg in configs.items():
                train(cfg, progress_bar=False, restart=True, log_every_s=None)
                timed[name].append(read_jsonl(Path(cfg.run_dir) / "steps.jsonl", finished=True)[warmup:])
                bar.update()
        bar.close()
    out = {}
    for name, per_round in timed.items():
        means = [statistics.fmean(s["step_s"] for s in round_) for round_ in per_round]
        every = [s for round_ in per_round for s in round_]
        out[name] = {
            "s_per_step": statistics.fmean(s["step_s"] for s in every),
            "se": statistics.stdev(means) / math.sqrt(len(means)),
            "round_means": means,
            "phase_s_per_step": {p: statistics.fmean(s[f"{p}_s"] for s in every) for p in STEP_PHASES},
            "tokens_generated_per_step": statistics.fmean(s["tokens_generated"] for s in every),
            "tokens_trained_per_step": statistics.fmean(s["tokens_trained"] for s in every),
        }
    return {"methods": out,
            "settings": {"rounds": rounds, "steps": steps, "warmup": warmup, "machine": platform.machine(),
                         "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                         **{k: v for k, v in base.items() if k in ("benchmark", "hardware", "base_model")}}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="YAML file of TrainConfig keys shared by the arms")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="TrainConfig keys shared by the arms")
    parser.add_argument("--methods", required=True, help="comma-separated method names (grpo-n16-m16,...)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="interleaved rounds (>= 2: the standard error's replicates)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per arm and round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from pods.training.config import parse_overrides, read_config_file

    base = dict(read_config_file(args.config)) if args.config else {}
    base.update(parse_overrides(list(args.overrides)))
    result = measure(base, [m for m in args.methods.split(",") if m], args.rounds, args.steps, args.warmup,
                     progress=not args.no_progress)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    for name, v in result["methods"].items():
        print(f"{name}: {v['s_per_step']:.4f} s/step (se {v['se']:.4f})")
    return 0
