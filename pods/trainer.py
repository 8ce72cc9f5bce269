"""GRPO and GRPO-PODS: one training loop, readable top to bottom.

Per step: take `prompts_per_step` prompts, generate `n` rollouts each, score them, keep `m` per
prompt with the configured rule, then compute everything per-rollout (reference log-probs,
advantages, the update) for the kept rollouts only: dropping rollouts before any per-rollout
forward pass is where PODS saves its time. Vanilla GRPO is `m == n` (rule `identity`); the
paper's GRPO-GA baseline is the same loop with m == n at the large n, spread over more
micro-batches.

Outputs (docs/contracts.md): `config.yaml`, `steps.jsonl`, `evals.jsonl`, `summary.json` and a
resumable `checkpoint/` in the run directory. Starting the same command again after a crash
continues from the last checkpoint. The run directory is never lost to a mistake: the trainer
holds its lock for the whole run (a second writer fails at once, naming the first), leaves a
finished run untouched, refuses files it cannot resume unless told to start over (`restart`),
and stops on a non-finite loss, gradient or policy with `status: failed` and the last good
checkpoint kept.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import pods.checkpoint as ckpt
from pods.atomic import read_yaml, write_json, write_yaml
from pods.batches import Rollouts, UpdateBatch
from pods.config import TrainConfig, config_help, load_train_config
from pods.distributed import all_sum, barrier, gather_batch, world
from pods.evaluation import EvalSet, evaluate
from pods.grpo import kept_advantages
from pods.rollout import make_rollout_engine
from pods.rollout.base import encode_prompts
from pods.runs import (RUN_FILES, RunDirError, RunFailed, RunInterrupted, RunLock, append_jsonl, build_summary,
                       describe_holder, produced_files, read_jsonl, truncate_jsonl)
from pods.selection import select
from pods.timing import Heartbeat, PhaseTimer, TrainClock
from pods.tracking import FOLDER as TRACKING
from pods.tracking import REPORTING_KEYS, Tracker, hardware_profile
from pods.update import make_update_engine

CHECKPOINT = "checkpoint"  # the folder of pods.checkpoint's files
# Keys that may differ when a run is started again: a larger budget extends a finished run, and a
# run directory that was moved (or copied from a clone) is still the same run.
# Live tracking can be turned on or off for a run that continues: it reports, it does not train.
RESUMABLE_CHANGES = {"max_train_time_s", "max_steps", "run_dir", *REPORTING_KEYS}


# --- processes -----------------------------------------------------------------------------------
# A multi-process update engine (deepspeed) starts torch.distributed. Each process then generates,
# scores and selects for its own share of the step's prompts (generation is the parallel phase),
# the kept rollouts are gathered, and the engine splits the update over the processes again.
# Process 0 alone writes the run files; each process keeps its own checkpoint. The helpers
# (world, all_sum, barrier, gather_batch) are pods.distributed's.
def checkpoint_suffix() -> str:
    """Each process of a multi-process run keeps its own state file (`-rank<r>`)."""
    rank, size = world()
    return "" if size == 1 else f"-rank{rank}"


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


def dynamic_sample(first: tuple, draw, need: int, per_prompt: int, max_rounds: int, pad_id: int) -> tuple:
    """DAPO's dynamic sampling: the groups of `first` (rollouts, rewards, problems) whose rewards
    are not all equal, topped up from `draw(k)` (k fresh prompts, generated and scored) round by
    round until `need` groups are informative or `max_rounds` rounds ran. A dropped group reaches
    no selection and no forward pass. Returns (rollouts, rewards, problems, rounds); when no round
    gave an informative group, the last round's groups (their advantages are all zero)."""
    kept, have, rounds, batch = [], 0, 1, first
    while True:
        rollouts, rewards, problems = batch
        useful = (rewards.max(dim=1).values != rewards.min(dim=1).values).nonzero().flatten().tolist()
        useful = useful[: need - have]
        if useful:
            kept.append((rollouts.take_groups(useful), rewards[useful], [problems[g] for g in useful]))
            have += len(useful)
        if have >= need or rounds >= max_rounds:
            break
        batch = draw(math.ceil((need - have) / per_prompt))
        rounds += 1
    kept = kept or [batch]
    return (Rollouts.concat([k[0] for k in kept], pad_id), torch.cat([k[1] for k in kept]),
            [p for k in kept for p in k[2]], rounds)


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


class Preemption:
    """SIGTERM (what SLURM sends at a time limit or on preemption) asks the loop to stop after the
    step it is in: the loop checkpoints, records `interrupted` and exits with RunInterrupted.EXIT_CODE.
    A second signal, or one before the loop starts, is handled the same way; SIGKILL is not, and
    resuming from the last regular checkpoint covers it."""

    def __init__(self):
        self.requested, self._previous = False, None

    def _request(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> "Preemption":
        if threading.current_thread() is threading.main_thread():  # Python delivers signals there only
            self._previous = signal.signal(signal.SIGTERM, self._request)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def save_checkpoint(run_dir: Path, updater, progress: Progress) -> None:
    engine = updater.state_dict()  # collective for a multi-process engine
    ckpt.save(run_dir / CHECKPOINT, {"engine": engine, "progress": vars(progress), "rng": rng_state()},
                    suffix=checkpoint_suffix(), library_files=updater.checkpoint_files(engine))


def saved_config_differences(cfg: TrainConfig, run_dir: Path) -> list[str]:
    """`key=saved, not new` for every key (but a budget) where the run directory's config differs."""
    path = run_dir / "config.yaml"
    saved = read_yaml(path) if path.exists() else {}
    return [f"{key}={saved[key]!r}, not {value!r}" for key, value in cfg.to_dict().items()
            if key not in RESUMABLE_CHANGES and key in saved and saved[key] != value]


def has_checkpoint(run_dir: Path) -> bool:
    """A save to resume from (or the pickle of an earlier version, which resume then refuses)."""
    folder = run_dir / CHECKPOINT
    return any(folder.glob("state*.json")) or any(folder.glob(ckpt.PICKLE_GLOB))


def inspect_run_dir(cfg: TrainConfig, run_dir: Path) -> dict | None:
    """What this command may do with the run directory, decided before anything is loaded.

    Returns the summary of a finished run that this budget does not extend (nothing to do);
    raises RunDirError for a directory the command must not touch; None: start or resume.
    """
    files = produced_files(run_dir)
    summary = None
    if "summary.json" in files:
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except json.JSONDecodeError:
            raise RunDirError(f"{run_dir}/summary.json is not valid JSON; pass --restart to train the run "
                              "again from step 0, or delete the folder") from None
    status = (summary or {}).get("status")
    differences = saved_config_differences(cfg, run_dir) if files else []
    if status == "complete":
        if differences:
            raise RunDirError(f"{run_dir} holds a finished run with {'; '.join(differences)}; use another "
                              "run_dir (or --restart to discard it)")
        if budget_spent(cfg, summary.get("steps") or 0, summary.get("train_time_s") or 0.0):
            return summary
        if not has_checkpoint(run_dir):
            raise RunDirError(f"{run_dir} holds a finished run ({summary.get('steps')} steps) without the "
                              "checkpoint a larger budget would continue from; use another run_dir, or "
                              "--restart to train it again from step 0")
    elif files and not has_checkpoint(run_dir):
        raise RunDirError(f"{run_dir} holds {', '.join(files)}" + (f" (status {status})" if status else "")
                          + " but no checkpoint to resume from; pass --restart to discard them and start "
                          "again, or delete the folder")
    if differences and has_checkpoint(run_dir):
        raise RunDirError(f"{run_dir} holds a checkpoint of a run with {'; '.join(differences)}; use another "
                          "run_dir (or --restart to discard it)")
    if has_checkpoint(run_dir):  # a changed or planted file is refused before the model loads
        ckpt.check_folder(run_dir / CHECKPOINT)
    return None


def clear_run_dir(run_dir: Path) -> None:
    """Start over on purpose: every file of an earlier attempt goes (under the run's lock)."""
    for name in (*RUN_FILES, "config.yaml"):
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / CHECKPOINT, ignore_errors=True)
    shutil.rmtree(run_dir / TRACKING, ignore_errors=True)  # a new tracker run, not the old one continued


def resume_or_start(cfg: TrainConfig, run_dir: Path, updater) -> tuple[Progress, dict | None, str | None]:
    """Load the last checkpoint and cut the logs back to it, or start the run from step 0.

    Returns the progress, the saved RNG states (None on a fresh start) and a note on the files a
    library unpickles (None: there are none). Nothing is read before its sha256 matches the
    manifest, and the trainer's own files are data only (pods.checkpoint). `inspect_run_dir` has
    already refused a directory with logs but no checkpoint, so a fresh start finds no logs.
    """
    rank, size = world()
    folder, suffix = run_dir / CHECKPOINT, checkpoint_suffix()
    mine = ckpt.manifest_path(folder, suffix).is_file() or any(folder.glob(ckpt.PICKLE_GLOB))
    found = all_sum([float(mine)])[0]
    if 0 < found < size:
        raise RunDirError(f"{run_dir}: only {int(found)} of {size} processes have a checkpoint; "
                          "pass --restart to start again")
    if not found and has_checkpoint(run_dir):
        raise RunDirError(f"{folder} holds the checkpoint of a run with another number of processes "
                          f"({', '.join(sorted(p.name for p in folder.glob('state*.json')))}); start it with as "
                          "many, or pass --restart to train it again from step 0")
    if not found:  # a first save cut short leaves no manifest: nothing of it is read
        barrier()
        if rank == 0:
            shutil.rmtree(folder, ignore_errors=True)
        barrier()
        return Progress(), None, None
    manifest = ckpt.read_manifest(folder, suffix)  # JSON; a pickle of an earlier version is refused
    ckpt.verify(folder, manifest)  # every file's sha256 before any is read
    state = ckpt.load(folder, manifest)  # safetensors and JSON: data only
    library_files = updater.checkpoint_files(state["engine"])
    ckpt.verify_listed(folder, manifest, library_files)
    updater.load_state_dict(state["engine"])
    progress = Progress(**state["progress"])
    if rank == 0:  # what was logged after the checkpoint is done again, identically
        truncate_jsonl(run_dir / "steps.jsonl", lambda r: r["step"] <= progress.step)
        truncate_jsonl(run_dir / "evals.jsonl", lambda r: r["step"] <= progress.last_eval_step)
    barrier()
    note = (f"{updater.library_loader}; each matched the sha256 recorded at the save"
            if library_files and updater.library_loader else None)
    return progress, state["rng"], note


def provenance(cfg: TrainConfig) -> dict:
    """What the run starts from: a fingerprint of the base model's weights, its warm-start record
    (recipe and measured accuracy) when it has one, and the versions of the code that trains it."""
    import hashlib

    import transformers

    import pods
    from pods.hub import hub_origin

    base = cfg.model_path()
    digest = hashlib.sha256()
    for path in sorted([*base.glob("*.safetensors"), *base.glob("*.bin")]):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                digest.update(chunk)
    warm = base / "warmstart.json"
    return {"base_model": str(base), "base_model_sha256": digest.hexdigest(),
            "warmstart": json.loads(warm.read_text()) if warm.is_file() else None,
            "hub": hub_origin(base),  # hub id and commit of a fetched (or hub-cache) model
            "pods": pods.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def run_identity(cfg: TrainConfig) -> dict:
    return {"benchmark": cfg.benchmark, "hardware": cfg.hardware, "method": cfg.method, "rule": cfg.rule,
            "n": cfg.n, "m": cfg.m, "seed": cfg.seed, "prompts_per_step": cfg.prompts_per_step,
            "micro_batch": cfg.micro_batch, "grad_accum": cfg.grad_accum}


def write_summary(cfg: TrainConfig, run_dir: Path, progress: Progress, status: str, **extra) -> dict:
    """Write summary.json from the logs on disk (`pods.runs.build_summary`) and return it.

    The logs are read as a run being written (`finished=False`): this runs at every checkpoint
    and on a failure, while the run is still this process's.
    """
    summary = build_summary(
        run_identity(cfg), read_jsonl(run_dir / "evals.jsonl", finished=False),
        read_jsonl(run_dir / "steps.jsonl", finished=False),
        status=status, steps=progress.step, train_time_s=progress.train_s, wall_time_s=progress.wall_s,
        eval_s=progress.eval_s, checkpoint_s=progress.checkpoint_s, **extra,
    )
    write_json(run_dir / "summary.json", summary)
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
def train(cfg: TrainConfig, *, progress_bar: bool = True, restart: bool = False, log_every_s: float | None = 30.0) -> dict:
    """Run (or resume) one training run; returns its summary (on process 0).

    Process 0 holds the run directory's lock from before the model is loaded to the end. A finished
    run whose budget this config does not extend is returned as it is, untouched; `restart`
    discards whatever an earlier attempt left (the only way this function deletes run files).
    `log_every_s`: without a progress bar, a progress line every this many seconds (None: never).
    """
    run_dir = cfg.output_dir()
    lead = int(os.environ.get("RANK", "0")) == 0  # process 0 of a launcher writes the run files
    # read-only checks first: a finished run or a bad input leaves no trace at all
    if not restart and (finished := inspect_run_dir(cfg, run_dir)) is not None:
        if lead:
            print(f"{run_dir}: finished already ({finished.get('steps')} steps, "
                  f"{finished.get('train_time_s') or 0:.1f} s of training); nothing to do", flush=True)
        return finished if lead else {}
    try:
        base = cfg.model_path()
    except FileNotFoundError as exc:  # a hub id the offline cache lacks
        raise FileNotFoundError(f"base_model: {exc}") from None
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"base_model: no model folder at {base}; run `pods warmstart` first")
    lock = RunLock(run_dir)
    if lead:
        lock.acquire()
        if lock.previous:
            print(f"{run_dir}: taking over the lock left by {describe_holder(lock.previous)}, which no longer "
                  "holds it", flush=True)
    try:
        if restart:
            if lead:
                clear_run_dir(run_dir)
        else:
            inspect_run_dir(cfg, run_dir)  # again, now that no other writer can change it
        with Preemption() as preemption:
            return train_loop(cfg, run_dir, progress_bar=progress_bar, log_every_s=log_every_s, preemption=preemption)
    finally:
        lock.release()


def train_loop(cfg: TrainConfig, run_dir: Path, *, progress_bar: bool, log_every_s: float | None,
               preemption: Preemption | None = None) -> dict:
    from pods.models import load_policy
    from pods.tasks import get_task

    torch.set_num_threads(cfg.num_threads)
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
    state, saved_rng, resume_note = resume_or_start(cfg, run_dir, updater)
    origin = provenance(cfg)
    if lead:
        previous = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
        before = (previous.get("provenance") or {}).get("base_model_sha256")
        if saved_rng is not None and before not in (None, origin["base_model_sha256"]):
            raise RunDirError(f"{run_dir} was started from another base model (weights sha256 {before[:12]}, now "
                              f"{origin['base_model_sha256'][:12]} at {cfg.model_path()}); use another run_dir, or "
                              "--restart to train it again from this one")
        failed = previous.get("failure") if previous.get("status") == "failed" else None
        write_yaml(run_dir / "config.yaml", cfg.to_dict())
        print(startup_lines(cfg) + (f" | {size} processes" if size > 1 else "")
              + (f" | resuming at step {state.step}" if state.step else "")
              + (f" ({resume_note})" if resume_note else "")
              + (f" (the last attempt failed at step {failed['step']}: {failed['reason']})" if failed else ""),
              flush=True)
    prompts = PromptStream(task.train_problems(cfg.seed), cfg.seed, state.data_position)
    # process 0 reports each record as it is appended to the JSONL files (resume: the same tracker run)
    tracker = Tracker(cfg.report_to if lead else [], run_dir, resume_step=state.step, metadata={
        "config": cfg.to_dict(), "provenance": origin, "hardware": hardware_profile(cfg.hardware)})

    def train_time() -> float:
        """The training clock, process 0's everywhere: every process must take the same branches."""
        return clock.train if size == 1 else all_sum([clock.train if lead else 0.0])[0]

    def run_eval() -> dict:
        # stamped with the training time at which these weights were reached (the base model: none)
        record = {"step": state.step, "train_time_s": round(clock.train, 3) if state.step else 0.0,
                  "wall_time_s": round(clock.wall, 3)}
        with clock.paused(), timer("eval"):
            result = evaluate(
                sampler, task, tokenizer, eval_set, greedy=cfg.eval_greedy, repeats=cfg.eval_repeats,
                temperature=cfg.eval_temperature, max_new_tokens=cfg.max_new_tokens,
                batch_size=cfg.eval_batch, seed=cfg.seed, rank=rank, world_size=size, reduce=all_sum,
            )
        seconds = timer.take("eval")
        state.eval_s += seconds
        if lead:
            append_jsonl(run_dir / "evals.jsonl", record := record | result | {"eval_s": round(seconds, 4)})
            tracker.log_eval(record)
            if not progress_bar:  # a log file gets one line per evaluation instead of a bar
                print(f"step {state.step} | train {record['train_time_s']:.1f} s | accuracy {result['accuracy']:.3f} "
                      f"| mean length {result['mean_length']:.1f}", flush=True)
        state.last_eval_step = state.step
        return result

    def draw(k: int, made: dict) -> tuple[Rollouts, torch.Tensor, list]:
        """The groups of `k` fresh prompts (this process's share): generated, then scored; what
        was generated is added up in `made` (a dynamically sampled step draws several times)."""
        with timer("generate"):
            problems = [p for p in prompts.take(k)[rank::size] for _ in range(cfg.groups_per_prompt)]
            prompt_ids = encode_prompts(tokenizer, [task.render_prompt(p, tokenizer) for p in problems])
            sampler.sync_weights(updater.policy)
            rollouts = sampler.generate(prompt_ids, cfg.n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens)
        with timer("reward"):
            rewards = score(task, tokenizer, rollouts, problems)
        made["rollouts"] += len(rollouts)
        made["tokens"] += rollouts.num_tokens
        made["reward_sum"] += rewards.sum().item()
        made["flat"] += zero_variance_frac(rewards) * len(problems)
        made["groups"] += len(problems)
        return rollouts, rewards, problems

    def checkpoint(status: str = "running") -> dict | None:
        nonlocal checkpoint_step
        with clock.paused(), timer("checkpoint"):
            state.train_s, state.wall_s, state.data_position = clock.train, clock.wall, prompts.position
            save_checkpoint(run_dir, updater, state)
            barrier()
            summary = write_summary(cfg, run_dir, state, status, provenance=origin) if lead else None
        state.checkpoint_s += timer.take("checkpoint")  # counted from the next checkpoint on
        checkpoint_step = state.step
        return summary

    clock, timer = TrainClock(state.train_s, state.wall_s), PhaseTimer()
    checkpoint_step = state.step
    if saved_rng is None:
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed + 1_000_003 * rank)  # processes sample different rollouts
        checkpoint()  # from the first moment on, whatever this run logs can be resumed
    else:
        set_rng_state(saved_rng)
    bar = tqdm(
        total=cfg.max_steps if cfg.max_steps is not None else round(cfg.max_train_time_s),
        initial=state.step if cfg.max_steps is not None else min(round(clock.train), round(cfg.max_train_time_s)),
        unit="step" if cfg.max_steps is not None else "s", disable=not (progress_bar and lead), dynamic_ncols=True,
    )
    heartbeat = Heartbeat(None if progress_bar or not lead else log_every_s)
    doing = f"the evaluation at step {state.step}"
    try:
        if state.step == 0 and state.last_eval_step < 0:
            accuracy = run_eval()["accuracy"]  # the base model, at train_time_s == 0
            state.next_eval_s = cfg.eval_every_s or 0.0
        else:
            accuracy = read_jsonl(run_dir / "evals.jsonl", finished=False)[-1]["accuracy"]
        while not budget_spent(cfg, state.step, train_time()):
            doing = f"step {state.step + 1}"
            step_start = clock.train
            # 1. n rollouts per prompt, each prompt prefilled once (each process: its share of prompts)
            made = dict.fromkeys(("rollouts", "tokens", "reward_sum", "flat", "groups"), 0)
            rollouts, rewards, problems = draw(cfg.prompts_per_step, made)
            rounds = 1
            if cfg.dynamic_sampling:  # DAPO: flat groups dropped, fresh prompts until the step is full
                rollouts, rewards, problems, rounds = dynamic_sample(
                    (rollouts, rewards, problems), lambda k: draw(k, made), cfg.groups_per_step,
                    cfg.groups_per_prompt, cfg.max_generation_rounds, tokenizer.pad_token_id)
            # 2. keep m per prompt; from here on only kept rollouts cost anything
            with timer("select"):
                kept = select(rewards, cfg.m, cfg.rule)
                batch = UpdateBatch.from_rollouts(rollouts, kept_rows(kept, cfg.n), tokenizer.pad_token_id)
                advantages = kept_advantages(rewards, kept, normalize_over=cfg.normalize_over, scale=cfg.scale_rewards).flatten()
                if size > 1:  # the whole step's kept rollouts on every process; the engine splits the update
                    batch, advantages = gather_batch(batch, advantages, tokenizer.pad_token_id)
            # 3. One gradient step per generated batch: the sampling policy is the current one, so the
            # "old" log-probs come detached from the update's own forward pass (old_logprobs=None), and
            # the reference pass runs only when the KL term (or the authors' cost) asks for it.
            with timer("logprob"):
                ref_logprobs = updater.ref_logprobs(batch) if need_ref else None
            with timer("update"):
                metrics = updater.step(batch, advantages.float(), None, ref_logprobs)
            for name in ("loss", "grad_norm"):  # the weights are now spoilt: stop before anything is saved
                if not math.isfinite(metrics.get(name, 0.0)):
                    raise FloatingPointError(f"non-finite {name} ({metrics[name]}) in the update")
            state.step += 1

            phases = timer.lap()
            generated, tokens, reward_sum, flat, groups, trained_groups, kept_flat, stop = all_sum([
                made["rollouts"], made["tokens"], made["reward_sum"], made["flat"], made["groups"], len(problems),
                zero_variance_frac(torch.gather(rewards, 1, kept)) * len(problems),
                float(preemption is not None and preemption.requested),  # every process stops at the same step
            ])
            record = {
                "step": state.step, "train_time_s": round(clock.train, 4), "wall_time_s": round(clock.wall, 4),
                **{k: round(v, 6) for k, v in phases.items()}, "step_s": round(clock.train - step_start, 6),
                "rollouts_generated": int(generated), "rollouts_trained": len(batch),
                "tokens_generated": int(tokens), "tokens_trained": batch.num_tokens,
                "reward_mean": reward_sum / generated,
                "zero_variance_frac": flat / groups,  # share of the generated groups with no learning signal
                "kept_zero_variance_frac": kept_flat / trained_groups,
                # dynamic sampling: how many generation rounds the step took, how many flat groups it dropped
                **({"generation_rounds": rounds, "groups_dropped": int(groups - trained_groups)}
                   if cfg.dynamic_sampling else {}),
                # what else ran on the machine: runs that share it slow each other's clocks
                "load_avg_1m": round(os.getloadavg()[0], 3),
                **metrics,
            }
            if lead:
                append_jsonl(run_dir / "steps.jsonl", record)
                tracker.log_step(record)

            # 4. evaluation and checkpoints on their schedules, off the training clock
            now = train_time()
            done = budget_spent(cfg, state.step, now)
            by_steps = cfg.eval_every_steps is not None and state.step % cfg.eval_every_steps == 0
            by_time = cfg.eval_every_s is not None and now >= state.next_eval_s
            if by_steps or by_time or done:
                doing = f"the evaluation at step {state.step}"
                accuracy = run_eval()["accuracy"]
                while cfg.eval_every_s is not None and state.next_eval_s <= now:
                    state.next_eval_s += cfg.eval_every_s
            if not done and now >= state.next_checkpoint_s:
                state.next_checkpoint_s = now + cfg.checkpoint_every_s
                checkpoint()

            bar.set_postfix(step=state.step, reward=f"{record['reward_mean']:.3f}", acc=f"{accuracy:.3f}",
                            s_step=f"{clock.train / state.step:.3f}", refresh=False)
            bar.update(1 if cfg.max_steps is not None else max(0, round(clock.train) - bar.n))
            if heartbeat.due():
                print(f"step {state.step} | train {clock.train:.1f} s | reward {record['reward_mean']:.3f} | "
                      f"accuracy {accuracy:.3f} | {clock.train / state.step:.3f} s/step", flush=True)
            if stop and not done:
                bar.close()
                checkpoint("interrupted")
                raise RunInterrupted(f"{run_dir}: SIGTERM; stopped after step {state.step}, checkpointed, "
                                     "summary.json says 'interrupted'; run the same command again to resume")
        if state.last_eval_step != state.step:  # resumed from a checkpoint taken just before the budget ran out
            doing = f"the evaluation at step {state.step}"
            run_eval()
    except FloatingPointError as exc:
        bar.close()
        reason = f"{exc} (during {doing})"
        state.train_s, state.wall_s = clock.train, clock.wall
        if lead:
            failed_step = state.step + 1 if doing.startswith("step") else state.step
            write_summary(cfg, run_dir, state, "failed", provenance=origin,
                          failure={"step": failed_step, "reason": reason, "checkpoint_step": checkpoint_step})
        raise RunFailed(f"{run_dir}: stopped: {reason}; summary.json records the failure and the last good "
                        f"checkpoint (step {checkpoint_step}) is kept") from None
    finally:
        tracker.close()
    bar.close()

    summary = checkpoint("complete")
    if not lead:
        return {}
    print(
        f"{cfg.method}: {state.step} steps in {state.train_s:.1f} s of training "
        f"({summary['s_per_step'] or 0:.3f} s/step); accuracy base {summary['base_accuracy']:.3f}, "
        f"final {summary['final_accuracy']:.3f}, peak {summary['peak_accuracy']:.3f} -> {run_dir}",
        flush=True,
    )
    return summary


# --- CLI -----------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Train one run. KEY=VALUE pairs override the config file; every key is listed below. "
        "Restarting the same command resumes the run from its checkpoint; a finished run is left as it is."
    )
    parser.epilog = config_help()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", type=Path, default=None, help="YAML file of config keys")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--restart", action="store_true",
                        help="discard what an earlier attempt left in run_dir (logs, summary, checkpoint) and start at step 0")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--log-every", type=float, default=30.0, metavar="SECONDS",
                        help="without a progress bar (a log file, a batch job): a progress line this often")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cfg = load_train_config(args.config, args.overrides)  # every input error before any compute
    train(cfg, progress_bar=not args.no_progress and sys.stderr.isatty(), restart=args.restart,
          log_every_s=args.log_every)
    return 0
