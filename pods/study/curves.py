"""Run directories as tables, and the curves the verdict reads off them.

  load_runs(root)          every run directory, checked (pods.runs), as three tables
  align_to_grid(df, grid)  each seed's curve read off a common time grid (linear interpolation
                           between evaluations by default; ALIGNERS)
  mean_curve(df, grid)     mean over seeds, +-1.96 SEM band
  time_to_target(...)      a rule of pods.study.stats.TIME_RULES on two mean curves
  step_time_table(steps)   seconds per optimiser step and per phase, per run
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from pods import runs as runfiles
from pods.registry import Registry
from pods.study import stats
from pods.vocabulary import RUN_GLOB, RUN_KEY
from pods.vocabulary import STEP_PHASES as PHASES

RUN_KEYS = list(RUN_KEY)  # the run-directory components, as the tables' first columns
EVAL_COLUMNS = RUN_KEYS + ["step", "train_time_s", "eval_set", "accuracy", "mean_length"]
Z95 = 1.96  # the paper's bands are +-1.96 SEM across seeds
# What a comparison's curves are aligned by -> the evaluation column that says where each
# evaluation lies. `time` (training clock) is the paper's protocol; `step` compares the arms at
# equal optimiser steps (sample efficiency, the protocol of re-implementations that report
# accuracy per step). On the step axis every *_s column of the summary counts steps, the
# decomposition into step efficiency and step cost is left out (steps are the axis itself), and
# the primary endpoints form their own multiplicity family (pods.study.verdict).
# `cost` is the cost clock: step x the arm's measured seconds per step (evaluations' `cost_time_s`,
# runs trained with TrainConfig.step_cost_file; docs/verdict.md, "The clock"): a wall clock like
# `time`, without the scheduler's noise.
AXES = {"time": "train_time_s", "step": "step", "cost": "cost_time_s"}


# --------------------------------------------------------------------------------------------
# Reading run directories
# --------------------------------------------------------------------------------------------
def find_runs(root: str | os.PathLike) -> list[Path]:
    """Every `runs/{benchmark}/{hardware}/{method}/seed{k}` directory under `root`.

    `root` may be the results folder (holding `runs/`) or the `runs/` folder itself.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"runs folder {root} does not exist (--runs takes a results folder holding runs/, "
                                f"e.g. results)")
    base = root / "runs" if (root / "runs").is_dir() else root
    runs = sorted(p for p in base.glob(RUN_GLOB) if p.is_dir())
    if not runs:
        raise FileNotFoundError(f"no run directories ({{benchmark}}/{{hardware}}/{{method}}/seed<k>) under {base}")
    return runs


def _as_run_dirs(runs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    if isinstance(runs, (str, os.PathLike)):
        return find_runs(runs)
    return [Path(r) for r in runs]


class RunTables(NamedTuple):
    evals: pd.DataFrame      # one row per evaluation (EVAL_COLUMNS first)
    steps: pd.DataFrame      # one row per optimiser step (none for the authors' imported runs)
    summaries: pd.DataFrame  # one row per run


def _table(rows: list[dict], first: Sequence[str]) -> pd.DataFrame:
    table = pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=list(first))
    return table[list(first) + [c for c in table.columns if c not in first]]


def load_runs(runs) -> RunTables:
    """Every run directory under a root (or the listed ones), each read once and checked against
    the run schema (`pods.runs.read_run`): a broken file stops here, naming file, line and rule."""
    evals, steps, summaries = [], [], []
    for run_dir in _as_run_dirs(runs):
        run = runfiles.read_run(run_dir)
        evals += [{**run.key, **record} for record in run.evals]
        steps += [{**run.key, **record} for record in run.steps]
        summaries.append({**run.summary, **run.key})
    evals_table = _table(evals, EVAL_COLUMNS)
    for column in ("accuracy", "mean_length"):
        evals_table[column] = pd.to_numeric(evals_table[column])
    return RunTables(evals_table, _table(steps, RUN_KEYS + ["step", "train_time_s", "step_s"]),
                     _table(summaries, RUN_KEYS))


def load_evals(runs) -> pd.DataFrame:
    """One row per evaluation: benchmark, hardware, method, seed, step, train_time_s, eval_set,
    accuracy, mean_length (and any extra fields the runs logged)."""
    return load_runs(runs).evals


def load_steps(runs) -> pd.DataFrame:
    """One row per optimiser step from steps.jsonl (the authors' released runs have none)."""
    return load_runs(runs).steps


def load_summaries(runs) -> pd.DataFrame:
    """One row per run from summary.json."""
    return load_runs(runs).summaries


# --------------------------------------------------------------------------------------------
# Aligning curves to a time grid
# --------------------------------------------------------------------------------------------
# how -> function(times sorted ascending, values, grid) -> values on the grid (NaN = no point)
ALIGNERS: Registry = Registry("alignment")
DEFAULT_ALIGN = "linear"


def register_aligner(name: str):
    return ALIGNERS.register(name)


@register_aligner("linear")
def _align_linear(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Straight-line interpolation between the evaluations around each grid time (an evaluation
    that ran a second after a grid point is not credited to it); NaN past the last evaluation."""
    out = np.interp(grid, times, values)
    return np.where((grid >= times[0]) & (grid <= times[-1]), out, np.nan)


@register_aligner("nearest")
def _align_nearest(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The evaluation closest in time (earlier one on a tie): the authors' multi-GPU alignment."""
    idx = np.abs(times[None, :] - grid[:, None]).argmin(axis=1)
    return values[idx]


@register_aligner("previous")
def _align_previous(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The latest evaluation at or before the grid time: what a user could have stopped with."""
    idx = np.searchsorted(times, grid, side="right") - 1
    out = np.full(len(grid), np.nan)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


@register_aligner("exact")
def _align_exact(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Only evaluations logged exactly at the grid time (checkpoint schedules)."""
    lookup = dict(zip(times.tolist(), values.tolist()))
    return np.array([lookup.get(t, np.nan) for t in grid.tolist()], dtype=float)


def check_columns(df: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {', '.join(missing)}")


def align_to_grid(df: pd.DataFrame, grid: Sequence[float], how: str | None = None,
                  value: str = "accuracy") -> pd.DataFrame:
    """Each seed's `value` read off `grid` (seconds of train_time_s).

    Returns one row per (group, seed, grid time) with columns [<group keys>, seed, t, value],
    where the group keys are whichever of benchmark/hardware/method/eval_set `df` carries.
    """
    how = how or DEFAULT_ALIGN
    ALIGNERS[how]  # an unknown name: one line listing the known ones
    check_columns(df, ["seed", "train_time_s", value], "align_to_grid input")
    grid = np.asarray(grid, dtype=float)
    keys = [k for k in ("benchmark", "hardware", "method", "eval_set") if k in df.columns] + ["seed"]
    groups, values = [], []
    for group, part in df.dropna(subset=[value]).groupby(keys, sort=True):
        order = np.argsort(part["train_time_s"].to_numpy(float), kind="stable")
        times = part["train_time_s"].to_numpy(float)[order]
        groups.append(group if isinstance(group, tuple) else (group,))
        values.append(ALIGNERS[how](times, part[value].to_numpy(float)[order], grid))
    if not groups:
        return pd.DataFrame(columns=keys + ["t", value])
    out = pd.DataFrame(np.repeat(np.array(groups, dtype=object), len(grid), axis=0), columns=keys)
    out["t"] = np.tile(grid, len(groups))
    out[value] = np.concatenate(values)
    return out.astype({"seed": int})


def _single_arm(df: pd.DataFrame, what: str) -> None:
    for key in ("benchmark", "hardware", "method", "eval_set"):
        if key in df.columns and df[key].nunique() > 1:
            raise ValueError(f"{what}: expected one {key}, got {sorted(df[key].unique())}")


def seed_matrix(df: pd.DataFrame, grid: Sequence[float], how: str | None = None,
                value: str = "accuracy") -> tuple[list[int], np.ndarray]:
    """(seeds, array[seed, grid point]) of one arm."""
    _single_arm(df, "seed_matrix")
    aligned = align_to_grid(df, grid, how=how, value=value)
    if aligned.empty:
        raise ValueError(f"no {value} values to align")
    wide = aligned.pivot(index="seed", columns="t", values=value)
    wide = wide.reindex(columns=np.asarray(grid, dtype=float))
    return wide.index.tolist(), wide.to_numpy(float)


def curve_from_matrix(grid: Sequence[float], matrix: np.ndarray) -> pd.DataFrame:
    """Mean over seeds (rows) with the +-1.96 SEM band; SEM uses ddof=1 and is NaN for 1 seed."""
    n = np.sum(~np.isnan(matrix), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(matrix, axis=0) / np.maximum(n, 1), np.nan)
        sd = np.sqrt(np.nansum((matrix - mean) ** 2, axis=0) / (n - 1))
        sem = np.where(n > 1, sd / np.sqrt(n), np.nan)
    return pd.DataFrame({"t": np.asarray(grid, dtype=float), "mean": mean, "sem": sem,
                         "lo": mean - Z95 * sem, "hi": mean + Z95 * sem, "n_seeds": n})


def mean_curve(df: pd.DataFrame, grid: Sequence[float], how: str | None = None,
               value: str = "accuracy") -> pd.DataFrame:
    """DataFrame[t, mean, sem, lo, hi, n_seeds] of one arm (one method, benchmark, eval set)."""
    _, matrix = seed_matrix(df, grid, how=how, value=value)
    return curve_from_matrix(grid, matrix)


def default_grid(df: pd.DataFrame, how: str | None = None) -> np.ndarray:
    """The common evaluation times when every seed shares them (checkpoint schedules); otherwise
    a regular grid at the median evaluation interval (snapped to a round clock interval) up to the
    shortest seed's last evaluation."""
    check_columns(df, ["seed", "train_time_s"], "default_grid input")
    per_seed = [np.unique(g["train_time_s"].to_numpy(float)) for _, g in df.groupby(
        [k for k in RUN_KEYS if k in df.columns])]
    if not per_seed:
        raise ValueError("no evaluations to build a grid from")
    if all(len(s) == len(per_seed[0]) and np.array_equal(s, per_seed[0]) for s in per_seed):
        return per_seed[0]
    spacing = snap_interval(float(np.median(np.concatenate([np.diff(s) for s in per_seed if len(s) > 1]))))
    t_max = min(float(s[-1]) for s in per_seed)
    # a run shorter than one interval would leave only t = 0, where every method is equal
    grid = regular_grid(min(spacing, t_max) if t_max > 0 else spacing, t_max)
    if (how or DEFAULT_ALIGN) == "linear":  # interpolation needs an evaluation of every seed after each point
        grid = grid[grid <= t_max + 1e-9]
    return grid


CLOCK_INTERVALS_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600, 7200)


def snap_interval(spacing_s: float, tolerance: float = 0.1) -> float:
    """Evaluations land a little after their schedule (the step in progress finishes first), so a
    measured interval within 10% of a round clock interval is that interval."""
    nearest = min(CLOCK_INTERVALS_S, key=lambda c: abs(math.log(c / spacing_s)))
    return float(nearest) if abs(nearest - spacing_s) <= tolerance * nearest else spacing_s


def regular_grid(spacing_s: float, t_max_s: float) -> np.ndarray:
    """0, spacing, 2 x spacing, ... up to t_max (inclusive)."""
    if spacing_s <= 0 or t_max_s < 0:
        raise ValueError(f"grid needs spacing > 0 and t_max >= 0, got {spacing_s}, {t_max_s}")
    return np.arange(0.0, t_max_s + spacing_s / 2, spacing_s)


# --------------------------------------------------------------------------------------------
# Time to target: a registry of rules (docs/verdict.md declares and justifies each)
# --------------------------------------------------------------------------------------------
class Target(NamedTuple):
    target: float | None        # the accuracy to reach; None when the baseline never rose above its start
    t_baseline: float | None    # when the baseline reaches it
    t_method: float | None      # when the method reaches it; None = not within the grid
    speedup: float | None       # t_baseline / t_method; None when either is missing


def isotonic_fit(y: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing curve through `y` (one curve; pods.study.stats batches it)."""
    return stats.isotonic_fits(np.asarray(y, dtype=float))


def time_to_target(baseline_curve: pd.DataFrame, method_curve: pd.DataFrame,
                   threshold: float = 0.99, rule: str = "paper", fixed: float | None = None) -> Target:
    """A rule of pods.study.stats.TIME_RULES on two mean curves (DataFrames with columns t, mean) on one grid."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    check_columns(baseline_curve, ["t", "mean"], "baseline curve")
    check_columns(method_curve, ["t", "mean"], "method curve")
    t = baseline_curve["t"].to_numpy(float)
    if not np.array_equal(t, method_curve["t"].to_numpy(float)):
        raise ValueError("baseline and method curves are on different grids")
    y_b, y_m = baseline_curve["mean"].to_numpy(float), method_curve["mean"].to_numpy(float)
    ok = ~np.isnan(y_b) & ~np.isnan(y_m)
    if not (t[ok] > 0).any():
        raise ValueError("baseline curve has no point after t = 0")
    times = stats.TIME_RULES[rule](t[ok], y_b[ok][None, :], y_m[ok][None, :], threshold, fixed)
    value = lambda x: None if not np.isfinite(x[0]) else float(x[0])  # noqa: E731
    target, tb, tm = value(times.target), value(times.t_baseline), value(times.t_method)
    speedup = None if tb is None or tm is None else (tb / tm if tm > 0 else math.inf)
    return Target(target, tb if target is not None else None, tm if target is not None else None, speedup)


# --------------------------------------------------------------------------------------------
# Step times
# --------------------------------------------------------------------------------------------
def step_time_table(steps: pd.DataFrame, summaries: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: s_per_step and <phase>_s_per_step (means over optimiser steps).

    Runs with no steps.jsonl fall back to the `s_per_step` of their summary.json (how the
    authors' released runs carry it), with NaN phases.
    """
    rows = []
    if steps is not None and not steps.empty:
        for key, part in steps.groupby(RUN_KEYS):
            row = dict(zip(RUN_KEYS, key))
            row["s_per_step"] = float(part["step_s"].mean())
            for phase in PHASES:
                col = f"{phase}_s"
                row[f"{phase}_s_per_step"] = float(part[col].mean()) if col in part else np.nan
            rows.append(row)
    have = {tuple(r[k] for k in RUN_KEYS) for r in rows}
    if summaries is not None and not summaries.empty and "s_per_step" in summaries:
        for rec in summaries.to_dict("records"):
            key = tuple(rec[k] for k in RUN_KEYS)
            if key in have or rec.get("s_per_step") is None:
                continue
            row = {k: rec[k] for k in RUN_KEYS}
            row["s_per_step"] = float(rec["s_per_step"])
            phases = rec.get("phase_s_per_step") or {}
            for phase in PHASES:
                row[f"{phase}_s_per_step"] = float(phases.get(phase, np.nan))
            rows.append(row)
    columns = RUN_KEYS + ["s_per_step"] + [f"{p}_s_per_step" for p in PHASES]
    return pd.DataFrame.from_records(rows, columns=columns)
