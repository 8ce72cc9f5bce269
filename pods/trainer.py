"""GRPO and GRPO-PODS: one training loop, readable top to bottom.

Per step: take `prompts_per_step` prompts, generate `n` rollouts each, score them, keep `m` per
prompt with the configured rule, then compute everything per-rollout (reference log-probs,
advantages, the update) for the kept rollouts only: dropping rollouts before any per-rollout
forward pass is where PODS saves its time. Vanilla GRPO is `m == n` (rule `identity`); the
paper's GRPO-GA baseline is the same loop with m == n at the large n, spread over more
micro-batches.

Outputs (docs/contracts.md): `config.yaml`, `steps.jsonl`, `evals.jsonl`, `summary.json` and a
resumable `checkpoint/` in the run directory. Starting the same command again after a crash
continues from the last checkpoint.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from pods import io
from pods.config import TrainConfig, load_train_config
from pods.evaluation import EvalSet, evaluate
from pods.grpo import kept_advantages
from pods.rollout import make_rollout_engine
from pods.rollout.base import Rollouts, encode_prompts
from pods.selection import select
from pods.timing import STEP_PHASES, PhaseTimer, TrainClock
from pods.update import UpdateBatch, make_update_engine

CHECKPOINT = "checkpoint/state.pt"
# Keys that may differ when a run is started again: a larger budget extends a finished run.
RESUMABLE_CHANGES = {"max_train_time_s", "max_steps"}


# --- processes -----------------------------------------------------------------------------------
# A multi-process update engine (deepspeed) starts torch.distributed. Each process then generates,
# scores and selects for its own share of the step's prompts (generation is the parallel phase),
# the kept rollouts are gathered, and the engine splits the update over the processes again.
# Process 0 alone writes the run files; each process keeps its own checkpoint.
def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a distributed run."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_sum(values: list[float]) -> list[float]:
    """Element-wise sum over processes (identity in one process)."""
    if world()[1] == 1:
        return values
    nccl = dist.get_backend() == "nccl"
    t = torch.tensor(values, dtype=torch.float64, device=torch.cuda.current_device() if nccl else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()


def checkpoint_path(run_dir: Path) -> Path:
    rank, size = world()
    return run_dir / (CHECKPOINT if size == 1 else CHECKPOINT.replace(".pt", f"-rank{rank}.pt"))


# --- data ----------------------------------------------------------------------------------------
class PromptStream:
    """Training problems in a fresh seeded permutation per epoch; the position is the whole state."""

    def __init__(self, problems: list, seed: int, position: int = 0):
        if not problems:
            raise ValueError("the task returned no training problems")
        self.problems, self.seed, self.position = problems, seed, position
        self._epoch, self._order = -1, None

    def take(self, k: int) -> list:
        out = []
        for _ in range(k):
            epoch, index = divmod(self.position, len(self.problems))
            if epoch != self._epoch:
                self._epoch = epoch
                self._order = np.random.default_rng([self.seed, epoch]).permutation(len(self.problems))
            out.append(self.problems[self._order[index]])
            self.position += 1
        return out


# --- the phases of one step ----------------------------------------------------------------------
def score(task, tokenizer, rollouts: Rollouts, problems: list) -> torch.Tensor:
    """Rewards `[G, n]` of the decoded completions."""
    texts = tokenizer.batch_decode(rollouts.completion_ids, skip_special_tokens=True)
    rewards = [task.reward(text, problems[g]) for text, g in zip(texts, rollouts.group.tolist())]
    return torch.tensor(rewards, dtype=torch.float64).view(len(problems), rollouts.n)


def kept_rows(kept: torch.Tensor, n: int) -> torch.Tensor:
    """Row indices into the `[G*n]` rollouts of the kept `[G, m]` per-group indices."""
    return (kept + torch.arange(kept.shape[0])[:, None] * n).flatten()


def zero_variance_frac(rewards: torch.Tensor) -> float:
    """Share of groups whose rewards are all equal: they carry no learning signal."""
    return (rewards.max(dim=1).values == rewards.min(dim=1).values).double().mean().item()


# --- run state, checkpoints, resume --------------------------------------------------------------
@dataclass
class Progress:
    """What besides the engines' state a resumed run needs to continue exactly."""

    step: int = 0
    train_s: float = 0.0
    wall_s: float = 0.0
    data_position: int = 0
    next_eval_s: float = 0.0  # training time of the next time-scheduled evaluation
    next_checkpoint_s: float = 0.0
    last_eval_step: int = -1
    eval_s: float = 0.0  # seconds spent evaluating, off the training clock
    checkpoint_s: float = 0.0  # seconds spent checkpointing, off the training clock


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, updater, progress: Progress) -> None:
    import io as _bytes

    buffer = _bytes.BytesIO()
    torch.save({"engine": updater.state_dict(), "progress": vars(progress), "rng": rng_state()}, buffer)
    io.atomic_write_bytes(checkpoint_path(run_dir), buffer.getvalue())


def resume_or_start(cfg: TrainConfig, run_dir: Path, updater) -> tuple[Progress, dict | None]:
    """Load the last checkpoint and cut the logs back to it, or start the run from scratch.

    Returns the progress and the saved RNG states (None on a fresh start), which the caller
    restores just before the loop, after everything that might draw from them at start-up.
    """
    steps, evals = run_dir / "steps.jsonl", run_dir / "evals.jsonl"
    rank, size = world()
    found = all_sum([float(checkpoint_path(run_dir).exists())])[0]
    if 0 < found < size:
        raise ValueError(f"{run_dir}: only {int(found)} of {size} processes have a checkpoint; delete checkpoint/ to restart")
    if found:
        saved = io.read_yaml(run_dir / "config.yaml") if (run_dir / "config.yaml").exists() else {}
        for key, value in cfg.to_dict().items():
            if key not in RESUMABLE_CHANGES and key in saved and saved[key] != value:
                raise ValueError(
                    f"{run_dir} holds a checkpoint of a run with {key}={saved[key]!r}, not {value!r}; "
                    "use another run_dir or delete it"
                )
        state = torch.load(checkpoint_path(run_dir), weights_only=False)
        updater.load_state_dict(state["engine"])
        progress = Progress(**state["progress"])
        if rank == 0:
            io.truncate_jsonl(steps, lambda r: r["step"] <= progress.step)
            io.truncate_jsonl(evals, lambda r: r["step"] <= progress.step)
        barrier()
        return progress, state["rng"]
    # No checkpoint: whatever an earlier attempt logged cannot be continued, so start clean.
    if rank == 0:
        for path in (steps, evals, run_dir / "summary.json"):
            path.unlink(missing_ok=True)
    barrier()
    return Progress(), None


def summarize(cfg: TrainConfig, run_dir: Path, progress: Progress, complete: bool) -> dict:
    steps = io.read_jsonl(run_dir / "steps.jsonl")
    evals = io.read_jsonl(run_dir / "evals.jsonl")
    phases = {p: float(np.mean([s[f"{p}_s"] for s in steps])) if steps else 0.0 for p in STEP_PHASES}
    accuracies = [e["accuracy"] for e in evals]
    summary = {
        "benchmark": cfg.benchmark, "hardware": cfg.hardware, "method": cfg.method, "rule": cfg.rule,
        "n": cfg.n, "m": cfg.m, "seed": cfg.seed,
        "prompts_per_step": cfg.prompts_per_step, "micro_batch": cfg.micro_batch, "grad_accum": cfg.grad_accum,
        "steps": progress.step, "train_time_s": progress.train_s, "wall_time_s": progress.wall_s,
        "s_per_step": progress.train_s / progress.step if progress.step else None,
        "phase_s_per_step": phases,
        "base_accuracy": next((e["accuracy"] for e in evals if e["step"] == 0), None),
        "final_accuracy": accuracies[-1] if accuracies else None,
        "peak_accuracy": max(accuracies) if accuracies else None,
        "eval_s": progress.eval_s, "checkpoint_s": progress.checkpoint_s,
        "status": "complete" if complete else "running",
    }
    io.write_json(run_dir / "summary.json", summary)
    return summary


def budget_spent(cfg: TrainConfig, step: int, train_s: float) -> bool:
    return (cfg.max_steps is not None and step >= cfg.max_steps) or (
        cfg.max_train_time_s is not None and train_s >= cfg.max_train_time_s
    )


def startup_lines(cfg: TrainConfig) -> str:
    return (
        f"{cfg.method} on {cfg.benchmark} (seed {cfg.seed}): "
        f"prompts/step {cfg.prompts_per_step}"
        + (f" x {cfg.groups_per_prompt} groups" if cfg.groups_per_prompt > 1 else "")
        + f" | rollouts generated/step {cfg.rollouts_generated} (n={cfg.n}) | "
        f"rollouts trained/step {cfg.rollouts_trained} (m={cfg.m}, rule {cfg.rule}) | "
        f"micro-batch {cfg.micro_batch} | grad accumulation {cfg.grad_accum}"
    )


# --- the loop ------------------------------------------------------------------------------------
def train(cfg: TrainConfig, *, progress_bar: bool = True) -> dict:
    """Run (or resume) one training run; returns its summary (on process 0)."""
    from pods.models import load_policy
    from pods.tasks import get_task

    torch.set_num_threads(cfg.num_threads)
    run_dir = cfg.output_dir()
    task = get_task(cfg.benchmark, **cfg.task_options)
    device = cfg.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:  # one device per process under a launcher
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    model, tokenizer = load_policy(cfg.model_path(), device=device)
    updater = make_update_engine(cfg.update_engine, model=model, config=cfg)
    sampler = make_rollout_engine(cfg.rollout_engine, model=updater.policy, tokenizer=tokenizer, config=cfg)
    rank, size = world()  # after the update engine, which starts torch.distributed if it needs it
    if cfg.prompts_per_step % size:
        raise ValueError(f"config key 'prompts_per_step': {cfg.prompts_per_step} does not split over {size} processes")
    lead = rank == 0  # writes the run files
    eval_set = EvalSet.build(task, tokenizer, cfg.eval_items)
    need_ref = cfg.beta > 0 or cfg.always_compute_ref

    run_dir.mkdir(parents=True, exist_ok=True)
    state, saved_rng = resume_or_start(cfg, run_dir, updater)
    if lead:
        io.write_yaml(run_dir / "config.yaml", cfg.to_dict())
        print(startup_lines(cfg) + (f" | {size} processes" if size > 1 else "")
              + (f" | resuming at step {state.step}" if state.step else ""), flush=True)
    prompts = PromptStream(task.train_problems(cfg.seed), cfg.seed, state.data_position)

    def train_time() -> float:
        """The training clock, process 0's everywhere: every process must take the same branches."""
        return clock.train if size == 1 else all_sum([clock.train if lead else 0.0])[0]

    def run_eval() -> dict:
        # stamped with the training time at which these weights were reached
        record = {"step": state.step, "train_time_s": round(clock.train, 3), "wall_time_s": round(clock.wall, 3)}
        with clock.paused(), timer("eval"):
            result = evaluate(
                sampler, task, tokenizer, eval_set, greedy=cfg.eval_greedy, repeats=cfg.eval_repeats,
                temperature=cfg.eval_temperature, max_new_tokens=cfg.max_new_tokens,
                batch_size=cfg.eval_batch, seed=cfg.seed, rank=rank, world_size=size, reduce=all_sum,
            )
        seconds = timer.take("eval")
        state.eval_s += seconds
        if lead:
            io.append_jsonl(run_dir / "evals.jsonl", record | result | {"eval_s": round(seconds, 4)})
            if not progress_bar:  # a log file gets one line per evaluation instead of a bar
                print(f"step {state.step} | train {record['train_time_s']:.1f} s | accuracy {result['accuracy']:.3f} "
                      f"| mean length {result['mean_length']:.1f}", flush=True)
        state.last_eval_step = state.step
        return result

    def checkpoint(complete: bool) -> None:
        with clock.paused(), timer("checkpoint"):
            state.train_s, state.wall_s, state.data_position = clock.train, clock.wall, prompts.position
            save_checkpoint(run_dir, updater, state)
            barrier()
            if lead:
                summarize(cfg, run_dir, state, complete)
        state.checkpoint_s += timer.take("checkpoint")  # counted from the next checkpoint on

    clock, timer = TrainClock(state.train_s, state.wall_s), PhaseTimer()
    if state.step == 0 and state.last_eval_step < 0:
        accuracy = run_eval()["accuracy"]  # the base model, at train_time_s == 0
        state.next_eval_s = cfg.eval_every_s or 0.0
    else:
        accuracy = next(iter(io.read_jsonl(run_dir / "evals.jsonl")[-1:]), {}).get("accuracy", float("nan"))

    if saved_rng is None:
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed + 1_000_003 * rank)  # processes sample different rollouts
    else:
        set_rng_state(saved_rng)
    bar = tqdm(
        total=cfg.max_steps if cfg.max_steps is not None else round(cfg.max_train_time_s),
        initial=state.step if cfg.max_steps is not None else min(round(clock.train), round(cfg.max_train_time_s)),
        unit="step" if cfg.max_steps is not None else "s", disable=not (progress_bar and lead), dynamic_ncols=True,
    )
    while not budget_spent(cfg, state.step, train_time()):
        step_start = clock.train
        # 1. n rollouts per prompt, each prompt prefilled once (each process: its share of prompts)
        with timer("generate"):
            problems = [p for p in prompts.take(cfg.prompts_per_step)[rank::size] for _ in range(cfg.groups_per_prompt)]
            prompt_ids = encode_prompts(tokenizer, [task.render_prompt(p, tokenizer) for p in problems])
            sampler.sync_weights(updater.policy)
            rollouts = sampler.generate(prompt_ids, cfg.n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
        with timer("reward"):
            rewards = score(task, tokenizer, rollouts, problems)
        # 2. keep m per prompt; from here on only kept rollouts cost anything
        with timer("select"):
            kept = select(rewards, cfg.m, cfg.rule)
            batch = UpdateBatch.from_rollouts(rollouts, kept_rows(kept, cfg.n), tokenizer.pad_token_id)
            advantages = kept_advantages(rewards, kept, normalize_over=cfg.normalize_over, scale=cfg.scale_rewards).flatten()
            if size > 1:  # the whole step's kept rollouts on every process; the engine splits the update
                from pods.update.deepspeed_engine import gather_batch

                batch, advantages = gather_batch(batch, advantages, tokenizer.pad_token_id)
        # 3. One gradient step per generated batch: the sampling policy is the current one, so the
        # "old" log-probs come detached from the update's own forward pass (old_logprobs=None), and
        # the reference pass runs only when the KL term (or the authors' cost) asks for it.
        with timer("logprob"):
            ref_logprobs = updater.ref_logprobs(batch) if need_ref else None
        with timer("update"):
            metrics = updater.step(batch, advantages.float(), None, ref_logprobs)
        state.step += 1

        phases = timer.lap()
        generated, tokens, reward_sum, flat, kept_flat = all_sum([
            len(rollouts), rollouts.num_tokens, rewards.sum().item(),
            zero_variance_frac(rewards) * len(problems),
            zero_variance_frac(torch.gather(rewards, 1, kept)) * len(problems),
        ])
        record = {
            "step": state.step, "train_time_s": round(clock.train, 4), "wall_time_s": round(clock.wall, 4),
            **{k: round(v, 6) for k, v in phases.items()}, "step_s": round(clock.train - step_start, 6),
            "rollouts_generated": int(generated), "rollouts_trained": len(batch),
            "tokens_generated": int(tokens), "tokens_trained": batch.num_tokens,
            "reward_mean": reward_sum / generated,
            "zero_variance_frac": flat / cfg.groups_per_step,  # share of groups with no learning signal
            "kept_zero_variance_frac": kept_flat / cfg.groups_per_step,
            **metrics,
        }
        if lead:
            io.append_jsonl(run_dir / "steps.jsonl", record)

        # 4. evaluation and checkpoints on their schedules, off the training clock
        now = train_time()
        done = budget_spent(cfg, state.step, now)
        by_steps = cfg.eval_every_steps is not None and state.step % cfg.eval_every_steps == 0
        by_time = cfg.eval_every_s is not None and now >= state.next_eval_s
        if by_steps or by_time or done:
            accuracy = run_eval()["accuracy"]
            while cfg.eval_every_s is not None and state.next_eval_s <= now:
                state.next_eval_s += cfg.eval_every_s
        if not done and now >= state.next_checkpoint_s:
            state.next_checkpoint_s = now + cfg.checkpoint_every_s
            checkpoint(complete=False)

        bar.set_postfix(step=state.step, reward=f"{record['reward_mean']:.3f}", acc=f"{accuracy:.3f}",
                        s_step=f"{clock.train / state.step:.3f}", refresh=False)
        bar.update(1 if cfg.max_steps is not None else max(0, round(clock.train) - bar.n))
    bar.close()

    if state.last_eval_step != state.step:  # e.g. resumed from a checkpoint taken before the final eval
        run_eval()
    checkpoint(complete=True)
    if not lead:
        return {}
    summary = summarize(cfg, run_dir, state, complete=True)
    print(
        f"{cfg.method}: {state.step} steps in {state.train_s:.1f} s of training "
        f"({summary['s_per_step'] or 0:.3f} s/step); accuracy base {summary['base_accuracy']:.3f}, "
        f"final {summary['final_accuracy']:.3f}, peak {summary['peak_accuracy']:.3f} -> {run_dir}",
        flush=True,
    )
    return summary


# --- CLI -----------------------------------------------------------------------------------------
def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="train one GRPO / GRPO-PODS run (resumes from its checkpoint when restarted)",
        description="Train one run. KEY=VALUE pairs override the config file (see pods/config.py).",
    )
    parser.add_argument("--config", type=Path, default=None, help="YAML file of TrainConfig keys")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)  # every input error before any compute
    if not (cfg.model_path() / "config.json").is_file():
        raise FileNotFoundError(f"base_model: no model folder at {cfg.model_path()}; run `pods warmstart` first")
    train(cfg, progress_bar=not args.no_progress and sys.stderr.isatty())
    return 0
