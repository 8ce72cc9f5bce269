"""What several test modules share: the toy task, a tiny base model to train on it, and finished
run folders as the trainer leaves them (for the analysis, statistics and plotting tests).

The fixtures over these live in conftest.py; tests that call them directly import them from here.
"""
from __future__ import annotations

import json
from pathlib import Path

from pods import cli
from pods.runs import build_summary
from pods.training.config import load_train_config
from pods.training.tasks.base import Problem, Task
from pods.vocabulary import parse_method, run_path


# --------------------------------------------------------------------------------------------
# The toy task and a tiny base model
# --------------------------------------------------------------------------------------------
class FirstDigit(Task):
    """Trivially learnable: a completion is correct when its first character is a digit.

    An untrained character model does that about once in ten samples, so RL has signal from the
    first step and a greedy policy can go from near 0 to 1.
    """

    name = "first_digit"

    def __init__(self, train_size: int = 64, test_size: int = 64):
        words = ["".join(chr(97 + (i * 7 + j * 3) % 26) for j in range(3 + i % 4)) + "?"
                 for i in range(train_size + test_size)]
        self._train = [Problem(w, "digit") for w in words[:train_size]]
        self._test = [Problem(w, "digit") for w in words[train_size:]]

    def train_problems(self, seed):
        return self._train

    def test_problems(self):
        return self._test

    def render_prompt(self, problem, tokenizer=None):
        return problem.question

    def is_correct(self, completion, problem):
        return completion[:1].isdigit()

    def reward(self, completion, problem):
        return float(self.is_correct(completion, problem))


def char_tokenizer():
    """The embedded default's character tokenizer (a fixture for tests outside the training room)."""
    # imported here so that conftest.py, loaded by every test session, does not load torch
    from pods.training.models import build_char_tokenizer

    return build_char_tokenizer()


def save_tiny_base(path, seed=0, n_layer=2, d_model=64, n_head=2, **arch):
    """A tiny character-level policy and its tokenizer saved at `path` (a base model)."""
    from pods.training.models import build_tiny_policy

    tok = char_tokenizer()
    model = build_tiny_policy(tok, n_layer=n_layer, d_model=d_model, n_head=n_head, seed=seed, **arch)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def config(base, run_dir, *overrides):
    """A short training run of the toy task, as a TrainConfig."""
    return load_train_config(None, [
        "benchmark=first_digit", f"base_model={base}", f"run_dir={run_dir}", "prompts_per_step=4",
        "max_new_tokens=4", "max_train_time_s=null", "eval_every_s=null", "checkpoint_every_s=1000",
        "lr=3e-3", *overrides,
    ])


TOY = ["benchmark=first_digit", "n=8", "m=4", "prompts_per_step=4", "max_new_tokens=4", "lr=3e-3",
       "max_train_time_s=null", "eval_every_s=null", "eval_every_steps=2", "checkpoint_every_s=0"]


def pods_train(base, run_dir, *extra):
    """`pods train` of the toy task (TOY), in this process, checkpointing after every step."""
    return cli.main(["train", "--no-progress", f"base_model={base}", f"run_dir={run_dir}", *TOY, *extra])


# --------------------------------------------------------------------------------------------
# Finished runs
# --------------------------------------------------------------------------------------------
def run_at(runs: Path, benchmark: str, hardware: str, method: str, seed: int) -> Path:
    """A run's directory under the runs folder `runs`, by the layout every side reads (pods.vocabulary)."""
    return Path(run_path(str(runs), benchmark=benchmark, hardware=hardware, method=method, seed=seed))


def write_run(root: Path, method: str, seed: int, times, accs, lengths=None, benchmark="arith",
              hardware="cpu", eval_set="arith", steps=None, eval_steps=None) -> Path:
    """A finished run directory as the trainer leaves it: evals, steps and a consistent summary."""
    run = run_at(root / "runs", benchmark, hardware, method, seed)
    run.mkdir(parents=True, exist_ok=True)
    lengths = lengths if lengths is not None else [10.0 + i for i in range(len(times))]
    eval_steps = eval_steps if eval_steps is not None else [10 * i for i in range(len(times))]
    evals = [{"step": eval_steps[i], "train_time_s": t, "wall_time_s": t + 1, "eval_set": eval_set, "accuracy": a,
              "mean_length": n, "n_items": 100, "repeats": 1} for i, (t, a, n) in enumerate(zip(times, accs, lengths))]
    step_log = [{"step": i + 1, "train_time_s": total * (i + 1), "generate_s": gen, "reward_s": 0.0, "select_s": 0.0,
                 "logprob_s": 0.0, "update_s": upd, "step_s": total} for i, (gen, upd, total) in enumerate(steps or [])]
    (run / "evals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    if steps is not None:
        (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in step_log))
    parsed = parse_method(method)
    identity = {"benchmark": benchmark, "hardware": hardware, "method": method, "rule": parsed.rule,
                "n": parsed.n, "m": parsed.m, "seed": seed}
    summary = build_summary(identity, evals, step_log, status="complete",
                            train_time_s=max(float(times[-1]), step_log[-1]["train_time_s"] if step_log else 0.0))
    (run / "summary.json").write_text(json.dumps(summary))
    return run


GRID = [0, 60, 120, 180, 240]


def make_study_runs(root: Path) -> None:
    """Three seeds of GRPO and of PODS on arith/cpu, evaluated near the times of GRID."""
    for seed in range(3):
        jitter = [0, 1.0, -2.0, 0.5, 1.5, -1.0]
        times = [t + jitter[(i + seed) % 6] * (t > 0) for i, t in enumerate(GRID)]
        write_run(root, "grpo-n4-m4", seed, times, [0.1, 0.3, 0.5, 0.6, 0.6 + 0.01 * seed],
                  steps=[(0.5, 1.0, 2.0), (0.5, 1.2, 2.0)])
        write_run(root, "pods-max_variance-n16-m4", seed, times, [0.1, 0.55, 0.62, 0.65, 0.66],
                  steps=[(1.5, 1.0, 3.0), (1.7, 1.0, 3.2)])
