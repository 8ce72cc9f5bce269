"""A run directory's life, from the lock to the last summary: what `pods.training.trainer`'s loop hands off.

`RunDirectory` is a context manager. Before it is entered, `finished()` decides read-only what
the command may do (a finished run is returned untouched, a directory the command must not touch
is refused); entering takes the lock (held to the end: a second writer fails at once, naming the
first), discards an earlier attempt on `restart`, and watches for SIGTERM; `open()` resumes from
the last checkpoint or starts at step 0, writes `config.yaml` and opens the live trackers;
`checkpoint()` saves the trainer state and rewrites `summary.json`; `fail()` records a numerical
failure and keeps the last good checkpoint. Process 0 alone writes the run files; every process
keeps its own checkpoint (`-rank<r>`).
"""
from __future__ import annotations

import hashlib
import json
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

import pods.training.checkpoint as ckpt
from pods.atomic import read_yaml, write_json, write_yaml
from pods.runs import (
    RUN_FILES,
    RunDirError,
    RunFailed,
    RunFileError,
    RunLock,
    append_jsonl,
    build_summary,
    describe_holder,
    produced_files,
    read_jsonl,
    read_summary,
    truncate_jsonl,
)
from pods.training.config import TrainConfig
from pods.training.distributed import all_sum, barrier, world
from pods.training.tracking import FOLDER as TRACKING
from pods.training.tracking import REPORTING_KEYS, Tracker, hardware_profile

CHECKPOINT = "checkpoint"  # the folder of pods.training.checkpoint's files
# Keys that may differ when a run is started again: a larger budget extends a finished run, and a
# run directory that was moved (or copied from a clone) is still the same run.
# Live tracking can be turned on or off for a run that continues: it reports, it does not train.
RESUMABLE_CHANGES = {"max_train_time_s", "max_steps", "run_dir", *REPORTING_KEYS}


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
    prompt_filter: dict | None = None  # GRESO's per-prompt histories (PromptFilter.state_dict); None: no filter


def budget_spent(cfg: TrainConfig, step: int, train_s: float) -> bool:
    return (cfg.max_steps is not None and step >= cfg.max_steps) or (
        cfg.max_train_time_s is not None and train_s >= cfg.max_train_time_s
    )


class RunDirectory:
    """One run directory, owned by this command from `__enter__` to `__exit__` (see the module)."""

    def __init__(self, cfg: TrainConfig, *, restart: bool = False):
        self.cfg, self.path, self.restart = cfg, cfg.output_dir(), restart
        self.lead = int(os.environ.get("RANK", "0")) == 0  # process 0 of a launcher writes the run files
        self.lock = RunLock(self.path)
        self.preemption_requested = False  # set by SIGTERM or SIGINT: stop after the step in progress
        self.stop_signal: str | None = None  # "SIGTERM" or "SIGINT", the one that asked
        self._previous_handlers: dict = {}
        self.checkpoint_step = 0  # the last good checkpoint, kept when a run fails
        self.tracker: Tracker | None = None
        self._origin: dict | None = None

    # --- before anything is loaded ---------------------------------------------------------------
    def finished(self) -> dict | None:
        """Read-only: the summary of a finished run this budget does not extend (nothing to do),
        None to start or resume; RunDirError for a directory this command must not touch."""
        return None if self.restart else inspect_run_dir(self.cfg, self.path)

    def __enter__(self) -> "RunDirectory":
        if self.lead:
            self.lock.acquire()
            if self.lock.previous:
                print(f"{self.path}: taking over the lock left by {describe_holder(self.lock.previous)}, which no "
                      "longer holds it", flush=True)
        try:
            if self.restart:
                if self.lead:
                    clear_run_dir(self.path)
            else:
                inspect_run_dir(self.cfg, self.path)  # again, now that no other writer can change it
        except BaseException:
            self.lock.release()
            raise
        # SIGTERM (what SLURM sends at a time limit or on preemption) and SIGINT (Ctrl-C) ask the
        # loop to stop after the step it is in, checkpoint and exit (RunInterrupted: 75 after
        # SIGTERM, 130 after Ctrl-C, as a shell reports it); a second Ctrl-C stops at once and the
        # run resumes from its last checkpoint, as after SIGKILL. Python delivers signals to the
        # main thread only.
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous_handlers[signum] = signal.signal(signum, self._request_stop)
        return self

    def _request_stop(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.stop_signal == "SIGINT":
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if self.stop_signal is None:
            self.stop_signal = signal.Signals(signum).name
        self.preemption_requested = True
        if signum == signal.SIGINT:
            print(f"\n{self.path}: Ctrl-C: stopping after this step with a checkpoint (Ctrl-C again: at once)",
                  file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        if self.tracker is not None:
            self.tracker.close()
        self.lock.release()

    # --- start or resume ------------------------------------------------------------------------
    def open(self, updater, startup_line: str) -> tuple[Progress, dict | None]:
        """Resume from the last checkpoint (logs cut back to it) or start at step 0; write
        config.yaml, print the startup line and open the trackers. Returns the progress and the
        saved RNG states (None on a fresh start)."""
        cfg, run_dir = self.cfg, self.path
        rank, size = world()
        run_dir.mkdir(parents=True, exist_ok=True)
        progress, saved_rng, resume_note = resume_or_start(run_dir, updater)
        self.checkpoint_step = progress.step
        self._origin = provenance(cfg)
        if rank == 0:
            previous = read_summary(run_dir)
            before = (previous.get("provenance") or {}).get("base_model_sha256")
            if saved_rng is not None and before not in (None, self._origin["base_model_sha256"]):
                raise RunDirError(f"{run_dir} was started from another base model (weights sha256 {before[:12]}, "
                                  f"now {self._origin['base_model_sha256'][:12]} at {cfg.model_path()}); use another "
                                  "run_dir, or --restart to train it again from this one")
            failed = previous.get("failure") if previous.get("status") == "failed" else None
            write_yaml(run_dir / "config.yaml", cfg.to_dict())
            print(startup_line + (f" | {size} processes" if size > 1 else "")
                  + (f" | resuming at step {progress.step}" if progress.step else "")
                  + (f" ({resume_note})" if resume_note else "")
                  + (f" (the last attempt failed at step {failed['step']}: {failed['reason']})" if failed else ""),
                  flush=True)
        # process 0 reports each record as it is appended to the JSONL files (resume: the same tracker run)
        self.tracker = Tracker(cfg.report_to if rank == 0 else [], run_dir, resume_step=progress.step, metadata={
            "config": cfg.to_dict(), "provenance": self._origin, "hardware": hardware_profile(cfg.hardware,
                                                                                              cfg.hardware_dir)})
        return progress, saved_rng

    # --- while it runs ----------------------------------------------------------------------------
    def log_step(self, record: dict) -> None:
        if world()[0] == 0:
            append_jsonl(self.path / "steps.jsonl", record)
            self.tracker.log_step(record)

    def log_eval(self, record: dict) -> None:
        if world()[0] == 0:
            append_jsonl(self.path / "evals.jsonl", record)
            self.tracker.log_eval(record)

    def last_accuracy(self) -> float:
        return read_jsonl(self.path / "evals.jsonl", finished=False)[-1]["accuracy"]

    def checkpoint(self, updater, progress: Progress, status: str = "running") -> dict | None:
        """Save every process's trainer state, then (process 0) summary.json with `status`."""
        engine = updater.state_dict()  # collective for a multi-process engine
        saved = {key: value for key, value in vars(progress).items()  # no filter: the state of before it existed
                 if key != "prompt_filter" or value is not None}
        ckpt.save(self.path / CHECKPOINT, {"engine": engine, "progress": saved, "rng": rng_state()},
                  suffix=checkpoint_suffix(), library_files=updater.checkpoint_files(engine))
        barrier()
        self.checkpoint_step = progress.step
        return self._write_summary(progress, status) if world()[0] == 0 else None

    def fail(self, progress: Progress, step: int, reason: str) -> RunFailed:
        """Record a numerical failure at `step` (summary.json says 'failed'); the last good
        checkpoint stays. Returns the error to raise."""
        if world()[0] == 0:
            self._write_summary(progress, "failed", failure={"step": step, "reason": reason,
                                                             "checkpoint_step": self.checkpoint_step})
        return RunFailed(f"{self.path}: stopped: {reason}; summary.json records the failure and the last good "
                         f"checkpoint (step {self.checkpoint_step}) is kept")

    def _write_summary(self, progress: Progress, status: str, **extra) -> dict:
        """summary.json from the logs on disk (`pods.runs.build_summary`), read as a run still
        being written (`finished=False`): this runs at every checkpoint and on a failure."""
        summary = build_summary(
            run_identity(self.cfg), read_jsonl(self.path / "evals.jsonl", finished=False),
            read_jsonl(self.path / "steps.jsonl", finished=False),
            status=status, steps=progress.step, train_time_s=progress.train_s, wall_time_s=progress.wall_s,
            eval_s=progress.eval_s, checkpoint_s=progress.checkpoint_s, provenance=self._origin, **extra,
        )
        write_json(self.path / "summary.json", summary)
        return summary


# --- the run directory's state, read before anything is loaded -----------------------------------
def saved_config_differences(cfg: TrainConfig, run_dir: Path) -> list[str]:
    """`key=saved, not new` for every key (but a budget) where the run directory's config differs."""
    path = run_dir / "config.yaml"
    saved = read_yaml(path) if path.exists() else {}
    return [f"{key}={saved[key]!r}, not {_filled_in(cfg, value)!r}" for key, value in cfg.to_dict().items()
            if key not in RESUMABLE_CHANGES and key in saved and _filled_in(cfg, saved[key]) != _filled_in(cfg, value)]


def _filled_in(cfg: TrainConfig, value):
    """A path template (`models/{benchmark}/base`) as this run reads it, so that the template and
    the path it names are not a difference."""
    if not (isinstance(value, str) and "{" in value):
        return value
    try:
        return value.format(benchmark=cfg.benchmark, hardware=cfg.hardware, method=cfg.method, seed=cfg.seed)
    except (KeyError, IndexError, ValueError):
        return value


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
            summary = read_summary(run_dir)
        except RunFileError:
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


# --- checkpoints -----------------------------------------------------------------------------------
def checkpoint_suffix() -> str:
    """Each process of a multi-process run keeps its own state file (`-rank<r>`)."""
    rank, size = world()
    return "" if size == 1 else f"-rank{rank}"


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


def resume_or_start(run_dir: Path, updater) -> tuple[Progress, dict | None, str | None]:
    """Load the last checkpoint and cut the logs back to it, or start the run from step 0.

    Returns the progress, the saved RNG states (None on a fresh start) and a note on the files a
    library unpickles (None: there are none). Nothing is read before its sha256 matches the
    manifest, and the trainer's own files are data only (pods.training.checkpoint). `inspect_run_dir` has
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


# --- what summary.json says about the run ---------------------------------------------------------
def provenance(cfg: TrainConfig) -> dict:
    """What the run starts from: a fingerprint of the base model's weights, its warm-start record
    (recipe and measured accuracy) when it has one, and the versions of the code that trains it."""
    import transformers

    import pods
    from pods.training.hub import hub_origin

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
            "micro_batch": cfg.micro_batch, "grad_accum": cfg.grad_accum,
            # the cost clock (docs/verdict.md): the arm's measured seconds per step and its error
            **({"step_cost_s": cfg.step_cost_s, "step_cost_se": cfg.step_cost_se} if cfg.step_cost_s else {})}
