"""Run directories: who may write one, and what a reader may trust in it.

A run directory (`{results}/runs/{benchmark}/{hardware}/{method}/seed{seed}/`, docs/contracts.md)
is written by exactly one trainer process at a time and read by the analysis, the plots and the
paper importer. This module owns the run files and holds both sides of that contract:

- `RunLock`: the trainer's exclusive lock on its run directory, held for the run's whole life.
  It is a `flock` on `<run>/.lock`, so the kernel releases it when the holder dies, even by
  kill -9: a later trainer takes the lock over and says whose it was. The file records the
  holder's host and PID so that a second writer can name it. (On a cluster the run directories
  must be on a file system with working `flock`, as NFSv4 and Lustre mounted with `flock` are.)
- `append_jsonl` / `read_jsonl` / `truncate_jsonl`: the JSONL logs, appended one whole line per
  write (flushed and fsync'd) and read by one reader with one rule for a last line cut short by
  a kill: a trainer resuming the run drops it (`finished=False`), a reader of a finished run
  refuses it (`finished=True`, a RunFileError naming file:line). Whole files (summary.json,
  config.yaml) are replaced atomically through `pods.atomic`.
- `read_run` / `check_*`: the run schema, checked on every read. A violation raises
  `RunFileError` naming the file, the line and the rule broken, so a corrupt, interleaved or
  half-written run stops the analysis instead of becoming a number in a table.
- `build_summary`: `summary.json` computed from the logs it summarises, the one place it is
  built (trainer, paper importer and tests alike), so that the consistency check has one
  definition to hold it to.
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypedDict

from pods.atomic import atomic_write_text
from pods.vocabulary import STEP_PHASES, parse_method, parse_run_path

LOCK_FILE = ".lock"
RUN_FILES = ("steps.jsonl", "evals.jsonl", "summary.json")  # what a run has produced
STATUSES = ("running", "complete", "failed", "interrupted")


class _EvalFields(TypedDict):
    """The fields every evaluation record has."""

    step: int                   # optimiser steps done; 0 is the base model
    train_time_s: float         # training clock at the evaluation (evaluation and checkpoints excluded)
    eval_set: str               # which test set (a run may log several)
    accuracy: float | None      # in [0, 1]; null only where the source measured none
    mean_length: float | None   # mean completion length in tokens


class EvalRecord(_EvalFields, total=False):
    """One line of evals.jsonl (docs/contracts.md); `check_evals` holds every read to the fields
    above (all required) and these (logged by the trainer, absent from some imported runs)."""

    wall_time_s: float | None
    cost_time_s: float  # the cost clock: step x the arm's measured seconds per step (TrainConfig.step_cost_s)
    eval_s: float  # seconds the evaluation took (off the training clock)
    n_items: int
    repeats: int


class _StepFields(TypedDict):
    """The fields every step record has."""

    step: int                   # 1, 2, 3, ... without gaps
    train_time_s: float         # training clock after the step
    step_s: float               # the step's own seconds, all phases


class StepRecord(_StepFields, total=False):
    """One line of steps.jsonl; `check_steps` holds every read to the fields above and the phase
    times."""

    wall_time_s: float
    generate_s: float  # the phases of STEP_PHASES
    reward_s: float
    select_s: float
    logprob_s: float
    update_s: float
    rollouts_generated: int
    rollouts_trained: int
    tokens_generated: int
    tokens_trained: int
    reward_mean: float
    zero_variance_frac: float       # prompt groups whose n rewards are all equal
    kept_zero_variance_frac: float  # the same over the kept m
    loss: float
    grad_norm: float
    lr: float
    load_avg_1m: float              # the machine's 1-minute load average after the step
    generation_rounds: int          # dynamic sampling only: generation rounds the step took
    groups_dropped: int             # dynamic sampling only: groups generated but not trained
    prompts_skipped: int            # GRESO only: prompts its pre-rollout filter skipped before generating
    filter_p_easy: float            # GRESO only: its base probabilities after the step's adaptation
    filter_p_hard: float


def step_record(step: int, *, train_time_s: float, wall_time_s: float, phase_s: Mapping[str, float], step_s: float,
                rollouts_generated: int, rollouts_trained: int, tokens_generated: int, tokens_trained: int,
                reward_mean: float, zero_variance_frac: float, kept_zero_variance_frac: float, load_avg_1m: float,
                metrics: Mapping[str, float], generation_rounds: int | None = None,
                groups_dropped: int | None = None, prompt_filter: Mapping[str, float] | None = None) -> StepRecord:
    """One line of steps.jsonl, in the file's order, times rounded as the file keeps them.

    `phase_s` holds `<phase>_s` for each of STEP_PHASES; `metrics` is what the update engine
    reports (loss, grad_norm, lr, ...); the dynamic-sampling fields are written only when given, and
    GRESO's filter fields (`prompt_filter`: prompts_skipped, filter_p_easy, filter_p_hard) after them.
    """
    dynamic = {} if generation_rounds is None else {"generation_rounds": generation_rounds,
                                                     "groups_dropped": groups_dropped}
    dynamic.update(prompt_filter or {})
    return StepRecord(
        step=step, train_time_s=round(train_time_s, 4), wall_time_s=round(wall_time_s, 4),
        **{key: round(seconds, 6) for key, seconds in phase_s.items()}, step_s=round(step_s, 6),
        rollouts_generated=rollouts_generated, rollouts_trained=rollouts_trained,
        tokens_generated=tokens_generated, tokens_trained=tokens_trained,
        reward_mean=reward_mean, zero_variance_frac=zero_variance_frac,
        kept_zero_variance_frac=kept_zero_variance_frac, **dynamic,
        load_avg_1m=round(load_avg_1m, 3), **metrics,
    )


class RunDirError(ValueError):
    """A run directory the command must not touch: locked, finished, or holding unresumable files."""


class RunFailed(RuntimeError):
    """A run stopped on a numerical failure; its summary.json says so and its last checkpoint stays."""


class RunInterrupted(RuntimeError):
    """A run stopped by SIGTERM (a SLURM time limit or preemption) or SIGINT (Ctrl-C) after a whole
    step and a checkpoint; its summary.json says `interrupted` and the same command resumes it."""

    EXIT_CODE = 75  # after SIGTERM: EX_TEMPFAIL, "try again later", which is what resuming does
    EXIT_CODES = {"SIGTERM": EXIT_CODE, "SIGINT": 130}  # after Ctrl-C: 128 + SIGINT, as a shell reports it

    def __init__(self, message: str, signal_name: str = "SIGTERM"):
        super().__init__(message)
        self.exit_code = self.EXIT_CODES.get(signal_name, self.EXIT_CODE)


class RunFileError(ValueError):
    """A run file that breaks the run schema; the message names the file, the line and the rule."""


# --------------------------------------------------------------------------------------------
# One writer per run
# --------------------------------------------------------------------------------------------
class RunLock:
    """Exclusive, non-blocking lock on a run directory; a context manager.

    `acquire` raises RunDirError naming the holder when another process has the lock. When the
    lock file names a holder that no longer holds it (a killed run), the lock is taken over and
    `previous` says whose it was.
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self.previous: dict | None = None
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's line stays
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = describe_holder(_read_holder(fd))
                os.close(fd)
                raise RunDirError(
                    f"{self.path.parent} is being written by {holder}; one run directory takes one "
                    "writer (wait for it, stop it, or choose another run_dir)"
                ) from None
            # the releasing holder unlinks the file: a lock on an inode no longer at the path is no lock
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.previous = _read_holder(fd) or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                   "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_holder(fd: int) -> dict:
    raw = os.pread(fd, 4096, 0).decode(errors="replace").strip()
    try:
        holder = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        holder = {"text": raw}
    return holder if isinstance(holder, dict) else {"text": raw}


def describe_holder(holder: Mapping) -> str:
    """`pid 123 on host h (since ...)`: how a lock holder is named in messages."""
    if "pid" in holder:
        return f"pid {holder['pid']} on host {holder.get('host', '?')} (since {holder.get('since', '?')})"
    return "another process" + (f" ({holder['text']})" if holder.get("text") else "")


def produced_files(run_dir: str | os.PathLike) -> list[str]:
    """The run files (steps, evals, summary) present in a run directory."""
    return [name for name in RUN_FILES if (Path(run_dir) / name).exists()]


# --------------------------------------------------------------------------------------------
# The JSONL logs: appended by the trainer, read by everyone
# --------------------------------------------------------------------------------------------
def append_jsonl(path: str | os.PathLike, record: dict) -> None:
    """Append one record as one line, durably (a single write of the whole line, then fsync)."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl_numbered(path: str | os.PathLike, *, finished: bool) -> list[tuple[int, dict]]:
    """(line number, record) of every record of a .jsonl run log; the one reader of run logs.

    Every line is one JSON object ended by a newline; blank lines are skipped, and a line that is
    not a JSON object is a RunFileError naming `file:line`. A last line without its newline is a
    write cut short by a kill. Who reads decides what that means, with `finished`:
    - `finished=False`, the trainer resuming (or a watcher of) a run still being written: the cut
      line is dropped (the resumed trainer writes that record again), and a log not yet created
      has no records;
    - `finished=True`, a reader of a finished run (`read_run`, the analysis, the tests): the cut
      line is a RunFileError naming `file:line`, and a missing file is a FileNotFoundError. A
      reader of results never guesses.
    """
    path = Path(path)
    if not finished and not path.exists():
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")  # the piece after the last newline is empty, or a cut line
    if lines[-1]:
        if finished:
            raise RunFileError(f"{path}:{len(lines)}: the last line is cut short (no newline)")
    records = []
    for lineno, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunFileError(f"{path}:{lineno}: not valid JSON ({exc.msg}: column {exc.colno})") from None
        if not isinstance(record, dict):
            raise RunFileError(f"{path}:{lineno}: expected a JSON object")
        records.append((lineno, record))
    return records


def read_jsonl(path: str | os.PathLike, *, finished: bool) -> list[dict]:
    """The records of a .jsonl run log, by the rule of `read_jsonl_numbered`."""
    return [record for _, record in read_jsonl_numbered(path, finished=finished)]


def truncate_jsonl(path: str | os.PathLike, keep: Callable[[dict], bool]) -> int:
    """Rewrite the log `path` of a run being resumed atomically with the records for which `keep`
    is true (a cut last line goes too); returns how many."""
    records = [r for r in read_jsonl(path, finished=False) if keep(r)]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return len(records)


# --------------------------------------------------------------------------------------------
# Checking, strictly
# --------------------------------------------------------------------------------------------
def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def check_evals(records: Sequence[tuple[int, dict]], where: str, *, base: bool = True) -> None:
    """The evaluation log: every record well-typed, accuracy finite and in [0, 1] (null only where
    the source measured none, e.g. a length-only row of the authors' exports), and per eval set a
    base evaluation at step 0 and t = 0 first, steps strictly increasing, training time
    non-decreasing, and at least one evaluation after the base. `base=False` is for a source
    that never evaluated the base model (the authors' 8-GPU wandb exports start at their first
    logged evaluation)."""
    if not records:
        raise RunFileError(f"{where}: no evaluations (a run has at least the base model's at step 0)")
    last: dict[str, tuple[int, float]] = {}
    later: set[str] = set()
    for lineno, rec in records:
        at = f"{where}:{lineno}"
        for key in ("step", "train_time_s", "eval_set", "accuracy", "mean_length"):
            if key not in rec:
                raise RunFileError(f"{at}: lacks {key!r}")
        step, t, eval_set, acc, length = (rec[k] for k in ("step", "train_time_s", "eval_set", "accuracy",
                                                           "mean_length"))
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            raise RunFileError(f"{at}: step must be an integer >= 0, got {step!r}")
        if not (_finite(t) and t >= 0):
            raise RunFileError(f"{at}: train_time_s must be a finite number >= 0, got {t!r}")
        if not isinstance(eval_set, str) or not eval_set:
            raise RunFileError(f"{at}: eval_set must be a non-empty string, got {eval_set!r}")
        if acc is not None and not (_finite(acc) and 0.0 <= acc <= 1.0):
            raise RunFileError(f"{at}: accuracy must be a finite number in [0, 1], got {acc!r}")
        if length is not None and not (_finite(length) and length >= 0):
            raise RunFileError(f"{at}: mean_length must be a finite number >= 0, got {length!r}")
        if acc is None and length is None:
            raise RunFileError(f"{at}: neither accuracy nor mean_length is measured")
        if eval_set not in last:
            if base and (step != 0 or t != 0):
                raise RunFileError(f"{at}: the first {eval_set!r} evaluation must be the base model's "
                                   f"(step 0, train_time_s 0), got step {step}, train_time_s {t}")
            if not base:
                later.add(eval_set)
        else:
            prev_step, prev_t = last[eval_set]
            if step <= prev_step:
                raise RunFileError(f"{at}: steps must strictly increase per eval set ({eval_set!r} step "
                                   f"{step} after step {prev_step}): a duplicate or a second writer")
            if t < prev_t:
                raise RunFileError(f"{at}: train_time_s must not decrease ({t} after {prev_t})")
            later.add(eval_set)
        last[eval_set] = (step, t)
    for eval_set in last:
        if eval_set not in later:
            raise RunFileError(f"{where}: {eval_set!r} has only the base evaluation; a run has at least one later one")


def check_steps(records: Sequence[tuple[int, dict]], where: str) -> None:
    """The step log: steps 1, 2, 3, ... with none missing or repeated, training time
    non-decreasing, phase times and loss finite."""
    prev_t = 0.0
    for i, (lineno, rec) in enumerate(records, 1):
        at = f"{where}:{lineno}"
        for key in ("step", "train_time_s", "step_s"):
            if key not in rec:
                raise RunFileError(f"{at}: lacks {key!r}")
        if rec["step"] != i:
            raise RunFileError(f"{at}: expected step {i}, got {rec['step']!r} (steps are numbered 1, 2, ... "
                               "without gaps or repeats; a repeat means a second writer)")
        t = rec["train_time_s"]
        if not _finite(t) or t < prev_t:
            raise RunFileError(f"{at}: train_time_s must be finite and not decrease ({t!r} after {prev_t})")
        prev_t = t
        for key in ("step_s", *(f"{p}_s" for p in STEP_PHASES)):
            if key in rec and not (_finite(rec[key]) and rec[key] >= 0):
                raise RunFileError(f"{at}: {key} must be a finite number >= 0, got {rec[key]!r}")
        if "loss" in rec and not _finite(rec["loss"]):
            raise RunFileError(f"{at}: loss must be finite, got {rec['loss']!r}")


def primary_eval_set(evals: Sequence[Mapping], summary: Mapping | None = None) -> str:
    """The eval set a run's summary speaks of: the one it names, else the only one."""
    if summary and summary.get("eval_set"):
        return summary["eval_set"]
    sets = sorted({e["eval_set"] for e in evals})
    if len(sets) != 1:
        raise RunFileError(f"the run has eval sets {sets} and its summary names none (eval_set)")
    return sets[0]


def build_summary(identity: Mapping, eval_log: Sequence[Mapping], step_log: Sequence[Mapping], *, status: str,
                  eval_set: str | None = None, **extra) -> dict:
    """summary.json from the logs: `identity` (benchmark, hardware, method, rule, n, m, seed and
    whatever else describes the run), then what the logs say (steps, times, phase means, base /
    final / peak accuracy of `eval_set` up to the training time), then `extra`, whose `steps`,
    `train_time_s` and `phase_s_per_step` replace the values read off the step log."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    eval_set = eval_set or (primary_eval_set(eval_log) if eval_log else None)
    own = [e for e in eval_log if e["eval_set"] == eval_set and e["accuracy"] is not None]
    last = step_log[-1] if step_log else None
    train_s = extra.pop("train_time_s", last["train_time_s"] if last else 0.0)
    phases = {p: sum(s[f"{p}_s"] for s in step_log) / len(step_log) if step_log else 0.0 for p in STEP_PHASES}
    upto = [e for e in own if e["train_time_s"] <= train_s]
    after_base = [e["accuracy"] for e in upto if e["train_time_s"] > 0]
    summary = {
        **identity,
        "eval_set": eval_set,
        "steps": extra.pop("steps", last["step"] if last else 0),
        "train_time_s": train_s,
        "s_per_step": None,
        "phase_s_per_step": extra.pop("phase_s_per_step", phases),
        "base_accuracy": next((e["accuracy"] for e in own if e["step"] == 0), None),
        "final_accuracy": upto[-1]["accuracy"] if upto else None,
        "peak_accuracy": max(after_base) if after_base else None,
    }
    if summary["steps"]:
        summary["s_per_step"] = summary["train_time_s"] / summary["steps"]
    summary.update(extra)
    summary["status"] = status
    return summary


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def check_summary(summary: Mapping, evals: Sequence[Mapping], steps: Sequence[Mapping] | None,
                  key: Mapping, where: str) -> None:
    """summary.json against the directory it sits in and the logs it summarises."""
    if not isinstance(summary, Mapping):
        raise RunFileError(f"{where}: expected a JSON object")
    for name in ("status", "method", "seed"):
        if name not in summary:
            raise RunFileError(f"{where}: lacks {name!r}")
    if summary["status"] != "complete":
        reason = summary.get("failure", {}).get("reason", "") if summary["status"] == "failed" else ""
        how = {"failed": "; delete the run's folder to train it again, or change the config and use another "
                         "results_dir",
               "interrupted": "; run its train command again (or `snakemake reproduce`) to resume it",
               # a run killed with the workflow keeps this status; Snakemake's --rerun-incomplete misses it
               # when the run entered the plan after a checkpoint (a confirmation's later looks)
               "running": "; if no trainer is at work on it, run its train command again (in the workflow: "
                          "add `--forcerun <this summary.json>`) to resume it from its checkpoint"}
        raise RunFileError(f"{where}: status is {summary['status']!r}{': ' + reason if reason else ''}; "
                           f"only a complete run is a result{how.get(summary['status'], '')}")
    for name, value in key.items():
        if name in summary and summary[name] != value:
            raise RunFileError(f"{where}: {name} is {summary[name]!r} but the run directory says {value!r}")
    method = parse_method(key["method"])
    for name, value in (("rule", method.rule), ("n", method.n), ("m", method.m)):
        if name in summary and summary[name] != value:
            raise RunFileError(f"{where}: {name} is {summary[name]!r} but the method {key['method']} says {value!r}")
    if steps:
        last = steps[-1]
        if summary.get("steps") != last["step"]:
            raise RunFileError(f"{where}: steps is {summary.get('steps')!r} but steps.jsonl ends at step "
                               f"{last['step']}")
        if not (_finite(summary.get("train_time_s")) and summary["train_time_s"] >= last["train_time_s"]):
            raise RunFileError(f"{where}: train_time_s {summary.get('train_time_s')!r} is before the last "
                               f"step's {last['train_time_s']}")
    try:
        eval_set = primary_eval_set(evals, summary)
    except RunFileError as exc:
        raise RunFileError(f"{where}: {exc}") from None
    if not any(e["eval_set"] == eval_set for e in evals):
        raise RunFileError(f"{where}: eval_set {eval_set!r} has no evaluations in evals.jsonl")
    expected = build_summary({}, evals, steps or [], status="complete", eval_set=eval_set,
                             train_time_s=summary.get("train_time_s"))
    for name in ("base_accuracy", "final_accuracy", "peak_accuracy"):
        if name in summary and not _close(summary[name], expected[name]):
            raise RunFileError(f"{where}: {name} is {summary[name]!r} but evals.jsonl gives {expected[name]!r}")


@dataclass
class RunContents:
    """The validated contents of one run directory."""

    key: dict               # benchmark, hardware, method, seed (from the path)
    evals: list[EvalRecord]
    steps: list[StepRecord]  # empty for imported runs, which log no optimiser steps
    summary: dict


def run_key(run_dir: str | os.PathLike) -> dict:
    """benchmark, hardware, method and seed, read from the directory path (`parse_run_path`)."""
    try:
        return parse_run_path(Path(run_dir))
    except ValueError as exc:
        raise RunFileError(str(exc)) from None


def read_summary(run_dir: str | os.PathLike) -> dict:
    """A run's summary.json as it stands, whatever its status (`running`, `complete`, `failed`,
    `interrupted`); {} before the run wrote one. Not a JSON object: RunFileError."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(summary, dict):
        raise RunFileError(f"{path}: expected a JSON object")
    return summary


def read_run(run_dir: str | os.PathLike) -> RunContents:
    """Read and check one finished run directory (RunFileError / FileNotFoundError on a problem)."""
    run_dir = Path(run_dir)
    key = run_key(run_dir)
    paths = {name: run_dir / name for name in RUN_FILES}
    for name in ("evals.jsonl", "summary.json"):
        if not paths[name].exists():
            raise FileNotFoundError(f"{paths[name]} is missing")
    summary = read_summary(run_dir)
    eval_records = read_jsonl_numbered(paths["evals.jsonl"], finished=True)
    check_evals(eval_records, str(paths["evals.jsonl"]), base=summary.get("base_evaluation", True) is not False)
    step_records = read_jsonl_numbered(paths["steps.jsonl"], finished=True) if paths["steps.jsonl"].exists() else []
    check_steps(step_records, str(paths["steps.jsonl"]))
    evals, steps = [r for _, r in eval_records], [r for _, r in step_records]
    check_summary(summary, evals, steps, key, str(paths["summary.json"]))
    return RunContents(key, evals, steps, summary)
