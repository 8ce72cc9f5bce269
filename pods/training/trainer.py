"""GRPO and GRPO-PODS: one training loop, readable top to bottom.

`train_step` is one step: generate `n` rollouts for each of `prompts_per_step` prompts, score
them, keep `m` per prompt with the configured rule, then compute everything per-rollout (reference
log-probs, advantages, the update) for the kept rollouts only: dropping rollouts before any
per-rollout forward pass is where PODS saves its time. Vanilla GRPO is `m == n` (rule
`identity`). `train` runs steps until the budget is spent, evaluating and checkpointing off the
training clock; the run directory (lock, resume, config, summary, failures) is `pods.training.rundir`'s.
With several processes (deepspeed), each generates, scores and selects its share of the prompts;
the kept rollouts are gathered and the engine splits the update over the processes again.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from pods.grpo import kept_advantages
from pods.runs import RunInterrupted, StepRecord, step_record
from pods.selection import select
from pods.training.batches import Rollouts, UpdateBatch
from pods.training.config import DEFAULT_BASE, TrainConfig, config_help, load_train_config
from pods.training.cost_clock import on_cost_clock
from pods.training.distributed import all_sum, gather_batch, world
from pods.training.evaluation import EvalSet, evaluate
from pods.training.groups import PromptFilter, PromptStream, dynamic_sample, kept_rows, score, zero_variance_frac
from pods.training.rollout import make_rollout_engine
from pods.training.rollout.base import RolloutEngine, encode_prompts
from pods.training.rundir import Progress, RunDirectory, budget_spent, set_rng_state
from pods.training.tasks.base import Task
from pods.training.timing import Heartbeat, PhaseTimer, TrainClock
from pods.training.update import UpdateEngine, make_update_engine

if TYPE_CHECKING:  # transformers loads with the model (build_parts), not with this module
    from transformers import PreTrainedTokenizerBase


# --- one step ------------------------------------------------------------------------------------
def train_step(cfg: TrainConfig, parts: Parts, step: int, clock: TrainClock, timer: PhaseTimer) -> StepRecord:
    """Optimiser step number `step`: generate -> score -> select -> advantages -> update.

    Returns the step record (a line of steps.jsonl: docs/contracts.md).
    """
    step_start, made = clock.train, Generated()
    # 1. n rollouts per prompt, each prompt prefilled once (each process: its share of prompts), scored;
    # CPPO draws prompts_per_step * n / m prompts (cfg.prompts_drawn), GRESO skips some first (its filter)
    rollouts, rewards, problems = generate_and_score(cfg, parts, cfg.prompts_drawn, timer, made)
    rounds = 1
    if cfg.dynamic_sampling:  # DAPO: flat groups dropped, fresh prompts until the step is full
        rollouts, rewards, problems, rounds = dynamic_sample(
            (rollouts, rewards, problems), lambda k: generate_and_score(cfg, parts, k, timer, made),
            cfg.groups_per_step, cfg.groups_per_prompt, cfg.max_generation_rounds, parts.tokenizer.pad_token_id)
    # 2. keep m per prompt; from here on only kept rollouts cost anything
    with timer("select"):
        kept = select(rewards, cfg.m, cfg.rule)
        batch = UpdateBatch.from_rollouts(rollouts, kept_rows(kept, cfg.n), parts.tokenizer.pad_token_id)
        advantages = kept_advantages(rewards, kept, normalize_over=cfg.normalize_over,
                                     scale=cfg.scale_rewards).flatten()
        if parts.size > 1:  # the whole step's kept rollouts on every process; the engine splits the update
            batch, advantages = gather_batch(batch, advantages, parts.tokenizer.pad_token_id)
    # 3. One gradient step per generated batch: the sampling policy is the current one, so the
    # "old" log-probs come detached from the update's own forward pass (old_logprobs=None), and
    # the reference pass runs only when the KL term (or the authors' cost) asks for it.
    with timer("logprob"):
        ref_logprobs = parts.updater.ref_logprobs(batch) if cfg.beta > 0 or cfg.always_compute_ref else None
    with timer("update"):
        metrics = parts.updater.step(batch, advantages.float(), None, ref_logprobs)
    for name in ("loss", "grad_norm"):  # the weights are now spoilt: stop before anything is saved
        if not math.isfinite(metrics.get(name, 0.0)):
            raise FloatingPointError(f"non-finite {name} ({metrics[name]}) in the update")

    # 4. the step record (a line of steps.jsonl), its counts summed over the processes
    counts = made.counts(batch, torch.gather(rewards, 1, kept), rounds if cfg.dynamic_sampling else None)
    if parts.prompt_filter is not None:  # GRESO: its skips and its adapted probabilities
        position = parts.prompts.position
        counts["prompt_filter"] = parts.prompt_filter.end_step((position - 1) // len(parts.prompts.problems))
    return step_record(step, train_time_s=clock.train, wall_time_s=clock.wall, phase_s=timer.lap(),
                       step_s=clock.train - step_start, **counts, metrics=metrics,
                       load_avg_1m=os.getloadavg()[0])  # runs that share the machine slow each other's clocks


@dataclass
class Parts:
    """What every step works with, built once per run."""

    task: Task
    tokenizer: PreTrainedTokenizerBase  # the policy's
    updater: UpdateEngine  # owns the policy, its optimiser and the reference model
    sampler: RolloutEngine  # generates from the current policy
    eval_set: EvalSet
    prompts: PromptStream
    rank: int = 0
    size: int = 1
    prompt_filter: PromptFilter | None = None  # GRESO's (pre_rollout_filter), None for every other method


@dataclass
class Generated:
    """What a step generated, added up over its generation rounds (dynamic sampling draws several)."""

    rollouts: int = 0
    tokens: int = 0
    reward_sum: float = 0.0
    flat: float = 0.0  # groups whose rewards are all equal
    groups: int = 0

    def counts(self, batch: UpdateBatch, kept_rewards: torch.Tensor, rounds: int | None) -> dict:
        """The step record's counts, summed over the processes: what was generated, what was
        trained (`batch`, the kept rewards `[G, m]`), and with dynamic sampling how many generation
        rounds the step took and how many flat groups it dropped."""
        trained = len(kept_rewards)
        generated, tokens, reward_sum, flat, groups, trained_groups, kept_flat = all_sum([
            self.rollouts, self.tokens, self.reward_sum, self.flat, self.groups, trained,
            zero_variance_frac(kept_rewards) * trained])
        dynamic = {} if rounds is None else {"generation_rounds": rounds,
                                             "groups_dropped": int(groups - trained_groups)}
        return dict(rollouts_generated=int(generated), rollouts_trained=len(batch), tokens_generated=int(tokens),
                    tokens_trained=batch.num_tokens, reward_mean=reward_sum / generated,
                    zero_variance_frac=flat / groups,  # share of the generated groups with no learning signal
                    kept_zero_variance_frac=kept_flat / trained_groups, **dynamic)


def generate_and_score(cfg: TrainConfig, parts: Parts, k: int, timer: PhaseTimer,
                       made: Generated) -> tuple[Rollouts, torch.Tensor, list]:
    """The groups of `k` fresh prompts (this process's share): generated, then scored."""
    with timer("generate"):
        drawn = parts.prompts.take(k) if parts.prompt_filter is None else parts.prompt_filter.take(parts.prompts, k)
        problems = [p for p in drawn[parts.rank::parts.size] for _ in range(cfg.groups_per_prompt)]
        prompt_ids = encode_prompts(parts.tokenizer, [parts.task.render_prompt(p, parts.tokenizer) for p in problems])
        parts.sampler.sync_weights(parts.updater.policy)
        rollouts = parts.sampler.generate(prompt_ids, cfg.n, temperature=cfg.temperature,
                                          max_new_tokens=cfg.max_new_tokens)
    with timer("reward"):
        rewards = score(parts.task, parts.tokenizer, rollouts, problems)
        if parts.prompt_filter is not None:  # GRESO: every generated group joins its prompt's history
            parts.prompt_filter.record(rewards)
    made.rollouts += len(rollouts)
    made.tokens += rollouts.num_tokens
    made.reward_sum += rewards.sum().item()
    made.flat += zero_variance_frac(rewards) * len(problems)
    made.groups += len(problems)
    return rollouts, rewards, problems


# --- the loop ------------------------------------------------------------------------------------
def train(cfg: TrainConfig, *, progress_bar: bool = True, restart: bool = False,
          log_every_s: float | None = 30.0, build_base: bool = False) -> dict:
    """Run (or resume) one training run; returns its summary (on process 0).

    Process 0 holds the run directory's lock from before the model is loaded to the end. A finished
    run whose budget this config does not extend is returned as it is, untouched; `restart`
    discards whatever an earlier attempt left (the only way this function deletes run files).
    `log_every_s`: without a progress bar, a progress line every this many seconds (None: never).
    `build_base`: build a missing default base of an embedded benchmark first (`check_base_model`),
    as `pods train` does; otherwise a missing base is refused in one line naming the command.
    """
    cfg = on_cost_clock(cfg)   # budgets in steps of the measured step cost (docs/verdict.md, "The clock")
    # -------- the run directory: read-only checks first, so a finished run or a bad input leaves no trace
    run = RunDirectory(cfg, restart=restart)
    if (finished := run.finished()) is not None:
        if run.lead:
            print(f"{run.path}: finished already ({finished.get('steps')} steps, "
                  f"{finished.get('train_time_s') or 0:.1f} s of training); nothing to do", flush=True)
        return finished if run.lead else {}
    check_base_model(cfg, build=build_base, progress=progress_bar)
    with run:
        # -------- model init: fresh, or resumed from the last checkpoint
        parts, state, clock, timer = start(cfg, run)
        display = Display(cfg, state, clock, progress_bar and parts.rank == 0,
                          None if progress_bar or parts.rank else log_every_s)
        try:
            if state.step == 0 and state.last_eval_step < 0:  # the base model, at t = 0
                with failing_at(state.step, f"the evaluation at step {state.step}"):
                    accuracy = run_eval(cfg, parts, run, state, clock, timer, progress_bar)
                state.next_eval_s = cfg.eval_every_s or 0.0
            else:
                accuracy = run.last_accuracy()
            # -------- training loop
            while not budget_spent(cfg, state.step, train_time(clock, parts)):
                with failing_at(state.step + 1, f"step {state.step + 1}"):
                    record = train_step(cfg, parts, state.step + 1, clock, timer)
                state.step += 1
                run.log_step(record)
                stop = all_sum([float(run.preemption_requested)])[0] > 0  # every process stops at the same step

                # -------- evaluate and write checkpoints, on their schedules, off the training clock
                now = train_time(clock, parts)
                done = budget_spent(cfg, state.step, now)
                by_steps = cfg.eval_every_steps is not None and state.step % cfg.eval_every_steps == 0
                by_time = cfg.eval_every_s is not None and now >= state.next_eval_s
                if by_steps or by_time or done:
                    with failing_at(state.step, f"the evaluation at step {state.step}"):
                        accuracy = run_eval(cfg, parts, run, state, clock, timer, progress_bar)
                    while cfg.eval_every_s is not None and state.next_eval_s <= now:
                        state.next_eval_s += cfg.eval_every_s
                if not done and now >= state.next_checkpoint_s:
                    state.next_checkpoint_s = now + cfg.checkpoint_every_s
                    checkpoint(run, parts, state, clock, timer)

                # -------- timing and logging
                display.step(state.step, record["reward_mean"], accuracy)

                # -------- termination conditions (the budget: the loop's own)
                if stop and not done:
                    display.close()
                    checkpoint(run, parts, state, clock, timer, "interrupted")
                    signal_name = run.stop_signal or "SIGTERM"  # a process whose peer was signalled
                    raise RunInterrupted(f"{run.path}: {signal_name}; stopped after step {state.step}, checkpointed, "
                                         "summary.json says 'interrupted'; run the same command again to resume",
                                         signal_name)
            if state.last_eval_step != state.step:  # resumed from a checkpoint taken just before the budget ran out
                with failing_at(state.step, f"the evaluation at step {state.step}"):
                    run_eval(cfg, parts, run, state, clock, timer, progress_bar)
        except StepFailure as failure:
            display.close()
            state.train_s, state.wall_s = clock.train, clock.wall
            raise run.fail(state, failure.step, failure.reason) from None
        display.close()
        summary = checkpoint(run, parts, state, clock, timer, "complete")
    if parts.rank:
        return {}
    print(
        f"{cfg.method}: {state.step} steps in {state.train_s:.1f} s of training "
        f"({summary['s_per_step'] or 0:.3f} s/step); accuracy base {summary['base_accuracy']:.3f}, "
        f"final {summary['final_accuracy']:.3f}, peak {summary['peak_accuracy']:.3f} -> {run.path}",
        flush=True,
    )
    return summary


def start(cfg: TrainConfig, run: RunDirectory) -> tuple[Parts, Progress, TrainClock, PhaseTimer]:
    """The run's parts built and its directory opened: resumed from the last checkpoint (RNG states
    and all), or seeded and checkpointed at step 0."""
    parts = build_parts(cfg)
    state, saved_rng = run.open(parts.updater, startup_line(cfg))
    parts.prompts.position = state.data_position
    if parts.prompt_filter is not None and state.prompt_filter is not None:  # GRESO's histories, resumed
        parts.prompt_filter.load_state_dict(state.prompt_filter)
    clock, timer = TrainClock(state.train_s, state.wall_s), PhaseTimer()
    if saved_rng is None:
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed + 1_000_003 * parts.rank)  # processes sample different rollouts
        checkpoint(run, parts, state, clock, timer)  # from the first moment on, whatever is logged can be resumed
    else:
        set_rng_state(saved_rng)
    return parts, state, clock, timer


class StepFailure(Exception):
    """A numerical failure, blamed on the step it happened in or after (`failing_at`)."""

    def __init__(self, step: int, reason: str):
        super().__init__(reason)
        self.step, self.reason = step, reason


@contextmanager
def failing_at(step: int, during: str):
    """A non-finite number inside (FloatingPointError) is the run's failure at `step`, `during` what."""
    try:
        yield
    except FloatingPointError as exc:
        raise StepFailure(step, f"{exc} (during {during})") from None


def run_eval(cfg: TrainConfig, parts: Parts, run: RunDirectory, state: Progress, clock: TrainClock,
             timer: PhaseTimer, progress_bar: bool) -> float:
    """Evaluate the current policy off the training clock, log it, return its accuracy."""
    # stamped with the training time at which these weights were reached (the base model: none),
    # cut (not rounded) to the millisecond: a stamp past the clock's reading at the next checkpoint
    # would put the evaluation after the summary's training time, outside the run's own curve
    record = {"step": state.step, "train_time_s": math.floor(clock.train * 1000) / 1000 if state.step else 0.0,
              "wall_time_s": round(clock.wall, 3)}
    if cfg.step_cost_s is not None:  # the cost clock: the seed's curve, timed by the arm's measured step cost
        record["cost_time_s"] = round(state.step * cfg.step_cost_s, 4)
    with clock.paused(), timer("eval"):
        result = evaluate(
            parts.sampler, parts.task, parts.tokenizer, parts.eval_set, greedy=cfg.eval_greedy,
            repeats=cfg.eval_repeats, temperature=cfg.eval_temperature, max_new_tokens=cfg.max_new_tokens,
            batch_size=cfg.eval_batch, seed=cfg.seed, rank=parts.rank, world_size=parts.size, reduce=all_sum,
        )
    seconds = timer.take("eval")
    state.eval_s += seconds
    run.log_eval(record | result | {"eval_s": round(seconds, 4)})
    if parts.rank == 0 and not progress_bar:  # a log file gets one line per evaluation instead of a bar
        print(f"step {state.step} | train {record['train_time_s']:.1f} s | accuracy {result['accuracy']:.3f} "
              f"| mean length {result['mean_length']:.1f}", flush=True)
    state.last_eval_step = state.step
    return result["accuracy"]


def checkpoint(run: RunDirectory, parts: Parts, state: Progress, clock: TrainClock, timer: PhaseTimer,
               status: str = "running") -> dict | None:
    """Save the run off the training clock; returns the summary (process 0)."""
    with clock.paused(), timer("checkpoint"):
        state.train_s, state.wall_s, state.data_position = clock.train, clock.wall, parts.prompts.position
        if parts.prompt_filter is not None:
            state.prompt_filter = parts.prompt_filter.state_dict()
        summary = run.checkpoint(parts.updater, state, status)
    state.checkpoint_s += timer.take("checkpoint")  # counted from the next checkpoint on
    return summary


def train_time(clock: TrainClock, parts: Parts) -> float:
    """The training clock, process 0's everywhere: every process must take the same branches."""
    return clock.train if parts.size == 1 else all_sum([clock.train if parts.rank == 0 else 0.0])[0]


class Display:
    """A progress bar on a terminal; in a log file (a batch job) a progress line every `log_every_s`."""

    def __init__(self, cfg: TrainConfig, state: Progress, clock: TrainClock, bar: bool, log_every_s: float | None):
        self.clock, self.by_steps = clock, cfg.max_steps is not None
        self.bar = tqdm(
            total=cfg.max_steps if self.by_steps else round(cfg.max_train_time_s),
            initial=state.step if self.by_steps else min(round(clock.train), round(cfg.max_train_time_s)),
            unit="step" if self.by_steps else "s", disable=not bar, dynamic_ncols=True,
        )
        self.heartbeat = Heartbeat(log_every_s)

    def step(self, step: int, reward: float, accuracy: float) -> None:
        train = self.clock.train
        self.bar.set_postfix(step=step, reward=f"{reward:.3f}", acc=f"{accuracy:.3f}", s_step=f"{train / step:.3f}",
                             refresh=False)
        self.bar.update(1 if self.by_steps else max(0, round(train) - self.bar.n))
        if self.heartbeat.due():
            print(f"step {step} | train {train:.1f} s | reward {reward:.3f} | accuracy {accuracy:.3f} | "
                  f"{train / step:.3f} s/step", flush=True)

    def close(self) -> None:
        self.bar.close()


# --- set-up --------------------------------------------------------------------------------------
def check_base_model(cfg: TrainConfig, *, build: bool = False, progress: bool = True) -> None:
    """The base model is a model folder, or one line saying what is wrong and what to do, before any
    compute. With `build`, the default base of an embedded benchmark (`models/<benchmark>/base`, the
    workflow's) that does not exist yet is built first, as the workflow builds it, in one process."""
    try:
        base = cfg.model_path()
    except FileNotFoundError as exc:  # a hub id the offline cache lacks
        raise FileNotFoundError(f"base_model: {exc}") from None
    if (base / "config.json").is_file():
        return
    from pods.training.tasks import task_class
    from pods.training.warmstart_config import warmstart_command

    embedded = hasattr(task_class(cfg.benchmark), "worked_solution")  # a benchmark the package warm-starts
    command = warmstart_command([f"benchmark={cfg.benchmark}", f"out_dir={base}"]) if embedded else ""
    default = embedded and base == Path(DEFAULT_BASE.format(benchmark=cfg.benchmark))
    if not base.exists():
        if default and build and int(os.environ.get("WORLD_SIZE", "1")) == 1:
            build_default_base(cfg, base, progress)
            return
        what = f"no model folder at {base} (the folder does not exist)"
    else:
        what = f"{base} is not a model folder (it has no config.json)"
    if default:
        todo = f"build it as the workflow does: {command}"
    elif embedded:
        todo = f"check the path, or build a base there as the workflow does: {command}"
    else:
        todo = "check the path, or set base_model to a model folder (save_pretrained layout) or a hub id (owner/name)"
    raise FileNotFoundError(f"base_model: {what}; {todo}")


def build_default_base(cfg: TrainConfig, base: Path, progress: bool = True) -> None:
    """Build the missing default base of an embedded benchmark with the command the workflow runs
    (`pods warmstart` on the study's CPU kernels, in a process of its own: this one's torch has
    already picked its kernels), saying so in one line first; its own output follows."""
    import subprocess

    from pods.training.warmstart_config import CPU_KERNELS, KERNELS_VARIABLE, warmstart_command

    command = warmstart_command([f"benchmark={cfg.benchmark}", f"out_dir={base}"])
    print(f"pods train: no base model at {base} yet: building it first, as the workflow does (1-2 minutes on "
          f"one core): {command}", file=sys.stderr, flush=True)
    env = {**os.environ, KERNELS_VARIABLE: os.environ.get(KERNELS_VARIABLE, CPU_KERNELS)}
    argv = [sys.executable, "-m", "pods.cli", "warmstart", f"benchmark={cfg.benchmark}", f"out_dir={base}",
            *([] if progress else ["--no-progress"])]
    code = subprocess.run(argv, env=env).returncode
    if code != 0 or not (base / "config.json").is_file():
        raise FileNotFoundError(f"base_model: building {base} failed (pods warmstart exited {code}, its error "
                                f"above); build it by hand as the workflow does: {command}")


def build_parts(cfg: TrainConfig) -> Parts:
    from pods.training.models import fuse_activations, load_policy
    from pods.training.tasks import get_task

    torch.set_num_threads(cfg.num_threads)
    task = get_task(cfg.benchmark, **cfg.task_options)
    device = cfg.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:  # one device per process under a launcher
        device = f"cuda:{os.environ['LOCAL_RANK']}"
    model, tokenizer = load_policy(cfg.model_path(), device=device, attn_implementation=cfg.attention())
    if cfg.fused_activation:
        fuse_activations(model)
    updater = make_update_engine(cfg.update_engine, model=model, config=cfg)
    sampler = make_rollout_engine(cfg.rollout_engine, model=updater.policy, tokenizer=tokenizer, config=cfg)
    rank, size = world()  # after the update engine, which starts torch.distributed if it needs it
    if cfg.prompts_drawn % size:
        raise ValueError(f"config key 'prompts_per_step': {cfg.prompts_drawn} prompts per step do not split over "
                         f"{size} processes")
    prompts = PromptStream(task.train_problems(cfg.seed), cfg.seed)
    prompt_filter = None
    if cfg.pre_rollout_filter:
        prompt_filter = PromptFilter(
            len(prompts.problems), cfg.seed, p_easy=cfg.filter_p_easy, p_hard=cfg.filter_p_hard,
            target_zero_variance=cfg.filter_target_zero_variance, p_step=cfg.filter_p_step, p_min=cfg.filter_p_min,
            p_max=cfg.filter_p_max, keep_floor=cfg.filter_keep_floor, correct_reward=cfg.filter_correct_reward)
    return Parts(task, tokenizer, updater, sampler, EvalSet.build(task, tokenizer, cfg.eval_items),
                 prompts, rank, size, prompt_filter)


def startup_line(cfg: TrainConfig) -> str:
    return (
        f"{cfg.method} on {cfg.benchmark} (seed {cfg.seed}): "
        f"prompts/step {cfg.prompts_drawn}"
        + (f" (CPPO: {cfg.prompts_per_step} x n/m)" if cfg.completion_allocation else "")
        + (" (GRESO's pre-rollout filter)" if cfg.pre_rollout_filter else "")
        + (f" x {cfg.groups_per_prompt} groups" if cfg.groups_per_prompt > 1 else "")
        + f" | rollouts generated/step {cfg.rollouts_generated} (n={cfg.n}) | "
        f"rollouts trained/step {cfg.rollouts_trained} (m={cfg.m}, rule {cfg.rule}) | "
        f"micro-batch {cfg.micro_batch} | grad accumulation {cfg.grad_accum}"
    )


# --- CLI -----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Train one run. KEY=VALUE pairs override the config file; every key is listed below. "
        "Restarting the same command resumes the run from its checkpoint; a finished run is left as it is. "
        "Without base_model, an embedded benchmark's base (models/<benchmark>/base) that does not exist yet is "
        "built first, as the workflow builds it (1-2 minutes), so `pods train max_steps=20` is a quick run in a "
        "fresh clone, written under results/local/ (git-ignored)."
    )
    parser.epilog = config_help()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", type=Path, default=None, help="YAML file of config keys")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--restart", action="store_true",
                        help="discard what an earlier attempt left in run_dir (logs, summary, checkpoint) and start at "
                             "step 0")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--log-every", type=float, default=30.0, metavar="SECONDS",
                        help="without a progress bar (a log file, a batch job): a progress line this often")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)  # every input error before any compute
    train(cfg, progress_bar=not args.no_progress and sys.stderr.isatty(), restart=args.restart,
          log_every_s=args.log_every, build_base=True)
    return 0
