"""Seconds per optimiser step, by phase: GRPO, PODS and GRPO-GA in our loop, and GRPO and PODS in TRL.

    python benchmarks/step_time.py [--base-model models/arith/base] [--steps 8] [--warmup 2]
                                   [--out costs.json --hardware my-machine]

Our three arms run the real training loop (`pods.training.trainer.train`, evaluation off the clock) and
the phase means come from its `steps.jsonl`. TRL runs two arms on the same model, prompts, rewards
and batch (8 prompts per step, one optimiser step per generated batch, 128 completions trained per
step): TRL's `GRPOTrainer` with 16 completions per prompt, and `PODSGRPOTrainer`
(`pods.integrations.trl`) generating 64 and training on the max-variance 16. TRL steps are timed
with a callback and split into generation, selection (PODS), the rest of generate-and-score, and
the rest of the step. All in one process, one thread, one after the other, so they share the
machine's conditions.

TRL is needed only for its arms: `pip install "torch==<your torch>" -e ".[trl]"`; without it the
TRL rows are skipped with a message. Without a warm-started base model an untrained one of the
default shape is used: its completions stop at EOS only by chance (most run to `max_new_tokens`),
alike in both stacks.

`--out FILE` writes the phase-cost file that `pods project --costs FILE` (or the study config's
`cost_files`) reads: our loop's seconds per step of each arm, by method name, so that the step
efficiency measured in a study projects onto this machine (docs/verdict.md). Run it with the
settings of the study you project (prompts per step, micro-batch, completion length) and on a
machine doing nothing else.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from pods.runs import read_jsonl  # noqa: E402
from pods.training.config import load_train_config, parse_overrides  # noqa: E402
from pods.training.tasks import get_task  # noqa: E402
from pods.training.trainer import train  # noqa: E402
from pods.vocabulary import STEP_PHASES, method_for  # noqa: E402

ARMS = {  # label -> (n, m); micro_batch is shared, so GRPO-GA accumulates over more micro-batches
    "GRPO n=16": (16, 16),
    "PODS n=64->16": (64, 16),
    "GRPO-GA n=64": (64, 64),
}
TRL_ARMS = {"GRPO n=16": (16, 16), "PODS n=64->16": (64, 16)}  # label -> (n, m), m < n through PODSGRPOTrainer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-model", default="models/arith/base", help="model folder (built untrained if missing)")
    p.add_argument("--benchmark", default="arith")
    p.add_argument("--steps", type=int, default=8, help="timed steps per arm")
    p.add_argument("--warmup", type=int, default=2, help="untimed first steps per arm")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=128)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--rounds", type=int, default=2,
                   help="measure every arm this many times, interleaved, so that load drift hits all arms alike")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a TrainConfig override for our arms only (e.g. compile_update=true, rollout_engine=hf_static)")
    p.add_argument("--out", default=None, help="write a phase-cost file (JSON) for `pods project --costs`")
    p.add_argument("--hardware", default=platform.node(), help="name of this machine in the cost file")
    return p.parse_args()


def ensure_base(path: str, workdir: Path) -> tuple[Path, bool]:
    if (Path(path) / "config.json").is_file():
        return Path(path), True
    from pods.training.models import build_char_tokenizer, build_tiny_policy

    out = workdir / "untrained-base"
    tok = build_char_tokenizer()
    model = build_tiny_policy(tok)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out, False


def ours(args, base: Path, workdir: Path, n: int, m: int, round_: int) -> list[dict[str, float]]:
    """Per-step phase seconds of the timed steps of one short run of the real loop."""
    run_dir = workdir / f"ours-n{n}-m{m}-r{round_}"
    cfg = load_train_config(None, {
        "benchmark": args.benchmark, "base_model": str(base), "run_dir": str(run_dir), "n": n, "m": m,
        "prompts_per_step": args.prompts_per_step, "micro_batch": args.micro_batch,
        "max_new_tokens": args.max_new_tokens, "lr": args.lr, "max_steps": args.warmup + args.steps,
        "max_train_time_s": None, "eval_every_s": None, "eval_items": 8, "checkpoint_every_s": 1e9,
    } | parse_overrides(args.set))
    train(cfg, progress_bar=False)
    steps = read_jsonl(run_dir / "steps.jsonl", finished=True)[args.warmup:]
    return [{**{p: s[f"{p}_s"] for p in STEP_PHASES}, "step": s["step_s"]} for s in steps]


def trl_arm(args, base: Path, workdir: Path, n: int, m: int, round_: int) -> list[dict[str, float]] | None:
    """Per-step seconds in TRL: GRPOTrainer when m == n, PODSGRPOTrainer keeping m of n otherwise."""
    try:
        from trl import GRPOConfig, GRPOTrainer

        from pods.integrations.trl import PODSGRPOConfig, PODSGRPOTrainer
    except ImportError:
        print('TRL is not installed: skipping the TRL rows (pip install "torch==<your torch>" -e ".[trl]")')
        return None
    from datasets import Dataset
    from transformers import TrainerCallback

    from pods.training.models import load_policy

    task = get_task(args.benchmark)
    problems = task.train_problems(0)[: args.prompts_per_step * (args.warmup + args.steps)]
    model, tokenizer = load_policy(base)
    dataset = Dataset.from_dict({
        "prompt": [tokenizer.bos_token + task.render_prompt(p, tokenizer) for p in problems],
        "index": list(range(len(problems))),
    })

    def reward(completions, index, **_):
        return [task.reward(c, problems[i]) for c, i in zip(completions, index)]

    settings = dict(
        output_dir=str(workdir / f"trl-n{n}-m{m}-r{round_}"), per_device_train_batch_size=args.prompts_per_step * n,
        gradient_accumulation_steps=1, num_generations=n, max_completion_length=args.max_new_tokens,
        max_steps=args.warmup + args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        beta=0.0, temperature=1.0, loss_type="grpo", disable_dropout=True, use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, shuffle_dataset=False,
        dataloader_num_workers=0,
    )
    if m < n:
        config = PODSGRPOConfig(**settings, num_kept_generations=m, selection_rule="max_variance")
        trainer = PODSGRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                                  processing_class=tokenizer)
    else:
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=GRPOConfig(**settings),
                              train_dataset=dataset, processing_class=tokenizer)

    # Seconds per phase within the current step. PODS calls _generate twice per step (the second call hands the
    # kept completions back to TRL and takes no time), so time is summed per step rather than per call.
    current = {"generate": 0.0, "select": 0.0, "generate+score": 0.0}
    steps: list[dict[str, float]] = []

    def timed(name, fn):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                current[name] += time.perf_counter() - start
        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._generate_and_score_completions = timed("generate+score", trainer._generate_and_score_completions)
    if m < n:
        trainer._select = timed("select", trainer._select)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            current.update(dict.fromkeys(current, 0.0))
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            step = time.perf_counter() - self.start
            g, sel, gs = current["generate"], current["select"], current["generate+score"]
            steps.append({"generate": g, "reward": gs - g - sel, "select": sel, "logprob": 0.0, "update": step - gs,
                          "step": step})

    trainer.add_callback(StepTimer())
    trainer.train()
    return steps[args.warmup:]


def mean_row(steps: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.mean(s[key] for s in steps) for key in steps[0]}


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        base, warm = ensure_base(args.base_model, workdir)
        print(f"model: {base if warm else 'untrained default shape (no warm start found)'}; "
              f"{args.prompts_per_step} prompts/step, max {args.max_new_tokens} new tokens, "
              f"micro-batch {args.micro_batch}, {args.rounds} x {args.steps} timed steps after {args.warmup} "
              f"per arm, rounds interleaved, 1 thread; {os.getloadavg()[0]:.2f} load average (1 min)"
              + (f"; ours with {' '.join(args.set)}" if args.set else ""))
        measured: dict[str, list] = {label: [] for label in ARMS}
        trl_steps: dict[str, list] | None = None if args.skip_trl else {label: [] for label in TRL_ARMS}
        for round_ in range(args.rounds):
            for label, (n, m) in ARMS.items():
                measured[label] += ours(args, base, workdir, n, m, round_)
            for label, (n, m) in (TRL_ARMS if trl_steps is not None else {}).items():
                more = trl_arm(args, base, workdir, n, m, round_)
                if more is None:
                    trl_steps = None
                    break
                trl_steps[label] += more
        rows = {label: mean_row(steps) for label, steps in measured.items()}
        trl_rows = {label: mean_row(steps) for label, steps in trl_steps.items()} if trl_steps else None

    cols = [*STEP_PHASES, "step"]
    print()
    print("| arm | " + " | ".join(f"{c} s" for c in cols) + " | update/generate |")
    print("|---|" + "---|" * (len(cols) + 1))
    for label, row in rows.items():
        print(f"| {label} (ours) | " + " | ".join(f"{row[c]:.3f}" for c in cols)
              + f" | {row['update'] / row['generate']:.2f} |")
    if trl_rows is not None:
        import trl

        for label, row in trl_rows.items():
            print(f"| {label} (TRL {trl.__version__}) | " + " | ".join(f"{row[c]:.3f}" for c in cols)
                  + f" | {row['update'] / row['generate']:.2f} |")
        ratio = rows["GRPO n=16"]["step"] / trl_rows["GRPO n=16"]["step"]
        print(f"\nour GRPO step / TRL's GRPO step: {ratio:.2f} (goal: <= 0.35)")
        print(f"TRL: PODS step / GRPO step: {trl_rows['PODS n=64->16']['step'] / trl_rows['GRPO n=16']['step']:.2f}; "
              f"our PODS step / TRL's PODS step: "
              f"{rows['PODS n=64->16']['step'] / trl_rows['PODS n=64->16']['step']:.2f} "
              "(goal: <= 0.35)")
        print("TRL's `reward` column is scoring plus everything else in its generate-and-score phase "
              "(decoding, padding, advantages) but selection; its `update` is the rest of the step.")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (1 min)")
    ga, pods = rows["GRPO-GA n=64"], rows["PODS n=64->16"]
    print(f"ours: PODS step / GRPO step: {pods['step'] / rows['GRPO n=16']['step']:.2f}; "
          f"PODS step / GRPO-GA step: {pods['step'] / ga['step']:.2f}")
    if args.out:
        methods = {label: method_for(n, m, "max_variance").name for label, (n, m) in ARMS.items()}
        costs = {
            "hardware": args.hardware, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "s_per_step": {methods[label]: row["step"] for label, row in rows.items()},
            "phase_s_per_step": {methods[label]: {p: row[p] for p in STEP_PHASES} for label, row in rows.items()},
            "settings": {"prompts_per_step": args.prompts_per_step, "micro_batch": args.micro_batch,
                         "max_new_tokens": args.max_new_tokens, "base_model": str(base) if warm else "untrained",
                         "timed_steps": args.rounds * args.steps},
        }
        Path(args.out).write_text(json.dumps(costs, indent=2) + "\n")
        print(f"phase costs -> {args.out} (pods project --costs {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
