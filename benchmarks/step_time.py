"""Seconds per optimiser step, by phase: GRPO, PODS and GRPO-GA in our loop, and GRPO in TRL.

    python benchmarks/step_time.py [--base-model models/arith/base] [--steps 8] [--warmup 2]

Our three arms run the real training loop (`pods.trainer.train`, evaluation off the clock) and
the phase means come from its `steps.jsonl`; TRL's `GRPOTrainer` runs the GRPO arm on the same
model, prompts, rewards and batch (8 prompts x 16 completions, one optimiser step per batch),
timed per step with a callback and split into generation (+ scoring) and the rest. All in one
process, one thread, one after the other, so they share the machine's conditions.

TRL is needed only here: `pip install trl torch==<your torch>`; without it the TRL column is
skipped with a message. Without a warm-started base model an untrained one of the default shape
is used: it never emits EOS, so every completion is `max_new_tokens` long (in both stacks).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch  # noqa: E402

from pods.config import load_train_config  # noqa: E402
from pods.io import read_jsonl  # noqa: E402
from pods.tasks import get_task  # noqa: E402
from pods.timing import STEP_PHASES  # noqa: E402
from pods.trainer import train  # noqa: E402

ARMS = {  # label -> (n, m); micro_batch is shared, so GRPO-GA accumulates over more micro-batches
    "GRPO n=16": (16, 16),
    "PODS n=64->16": (64, 16),
    "GRPO-GA n=64": (64, 64),
}


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
    return p.parse_args()


def ensure_base(path: str, workdir: Path) -> tuple[Path, bool]:
    if (Path(path) / "config.json").is_file():
        return Path(path), True
    from pods.models import build_char_tokenizer, build_tiny_policy

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
    })
    train(cfg, progress_bar=False)
    steps = read_jsonl(run_dir / "steps.jsonl")[args.warmup:]
    return [{**{p: s[f"{p}_s"] for p in STEP_PHASES}, "step": s["step_s"]} for s in steps]


def trl_grpo(args, base: Path, workdir: Path, n: int, round_: int) -> list[dict[str, float]] | None:
    """Per-step seconds of TRL's GRPOTrainer: generation, generate-and-score minus generation, rest."""
    try:
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print("TRL is not installed: skipping the TRL column (pip install trl torch==<your torch>)")
        return None
    from datasets import Dataset
    from transformers import TrainerCallback

    from pods.models import load_policy

    task = get_task(args.benchmark)
    problems = task.train_problems(0)[: args.prompts_per_step * (args.warmup + args.steps)]
    model, tokenizer = load_policy(base)
    dataset = Dataset.from_dict({
        "prompt": [tokenizer.bos_token + task.render_prompt(p, tokenizer) for p in problems],
        "index": list(range(len(problems))),
    })

    def reward(completions, index, **_):
        return [task.reward(c, problems[i]) for c, i in zip(completions, index)]

    config = GRPOConfig(
        output_dir=str(workdir / f"trl-r{round_}"), per_device_train_batch_size=args.prompts_per_step * n,
        gradient_accumulation_steps=1, num_generations=n, max_completion_length=args.max_new_tokens,
        max_steps=args.warmup + args.steps, learning_rate=args.lr, lr_scheduler_type="constant",
        beta=0.0, temperature=1.0, loss_type="grpo", disable_dropout=True, use_cpu=True, bf16=False,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0, shuffle_dataset=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config, train_dataset=dataset,
                          processing_class=tokenizer)

    times: dict[str, list[float]] = {"step": [], "generate": [], "generate+score": []}

    def timed(name, fn):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[name].append(time.perf_counter() - start)
        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._generate_and_score_completions = timed("generate+score", trainer._generate_and_score_completions)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            times["step"].append(time.perf_counter() - self.start)

    trainer.add_callback(StepTimer())
    trainer.train()
    w = args.warmup
    return [
        {"generate": g, "reward": gs - g, "select": 0.0, "logprob": 0.0, "update": step - gs, "step": step}
        for step, g, gs in zip(times["step"][w:], times["generate"][w:], times["generate+score"][w:])
    ]


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
              "per arm, rounds interleaved, 1 thread")
        measured: dict[str, list] = {label: [] for label in ARMS}
        trl_steps: list | None = None if args.skip_trl else []
        for round_ in range(args.rounds):
            for label, (n, m) in ARMS.items():
                measured[label] += ours(args, base, workdir, n, m, round_)
            if trl_steps is not None:
                more = trl_grpo(args, base, workdir, 16, round_)
                trl_steps = None if more is None else trl_steps + more
        rows = {label: mean_row(steps) for label, steps in measured.items()}
        trl_row = mean_row(trl_steps) if trl_steps else None

    cols = [*STEP_PHASES, "step"]
    print()
    print("| arm | " + " | ".join(f"{c} s" for c in cols) + " | update/generate |")
    print("|---|" + "---|" * (len(cols) + 1))
    for label, row in rows.items():
        print(f"| {label} (ours) | " + " | ".join(f"{row[c]:.3f}" for c in cols)
              + f" | {row['update'] / row['generate']:.2f} |")
    if trl_row is not None:
        import trl

        print(f"| GRPO n=16 (TRL {trl.__version__}) | " + " | ".join(f"{trl_row[c]:.3f}" for c in cols)
              + f" | {trl_row['update'] / trl_row['generate']:.2f} |")
        ratio = rows["GRPO n=16"]["step"] / trl_row["step"]
        print(f"\nour GRPO step / TRL's GRPO step: {ratio:.2f} (goal: <= 0.5)")
        print("TRL's `reward` column is scoring plus everything else in its generate-and-score phase "
              "(decoding, advantages); its `update` is the rest of the step.")
    ga, pods = rows["GRPO-GA n=64"], rows["PODS n=64->16"]
    print(f"PODS step / GRPO step: {pods['step'] / rows['GRPO n=16']['step']:.2f}; "
          f"PODS step / GRPO-GA step: {pods['step'] / ga['step']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
