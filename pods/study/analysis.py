"""Curves, time-to-target, verdicts and speedup tables from run directories.

Everything here is a small pure function over pandas DataFrames in the run schema of
docs/contracts.md, so the same code reads our own runs and the authors' released results once
`pods.paper` has imported them into that schema. The rules that decide a comparison are
declared and justified in docs/verdict.md.

Pipeline:
  load_runs(root)                   every run directory, checked (pods.runs), as three tables
  align_to_grid(df, grid)           each seed's curve read off a common time grid (linear
                                    interpolation between evaluations by default)
  mean_curve(df, grid)              mean over seeds, +-1.96 SEM band
  comparison_arms(comp, evals)      both arms' curves and optimiser-step counts on the grid
  pods.study.verdict.compare(...)         every endpoint: estimate, calibrated interval, p, decision,
                                    plateau flag, and speedup = step efficiency / step-cost ratio
  summarize_study(study, evals, steps)  one row per (comparison, endpoint) -> summary.csv, the
                                    primary endpoints adjusted for multiplicity over the study
  verdict_table(summary)            one row per comparison, both questions -> summary.md, README

Study file (`pods analyze --study FILE`): YAML, either a list of comparisons or a mapping with a
`comparisons:` list. One comparison:

    - benchmark: gsm8k              # run-directory components (required)
      hardware: l40s-lora
      design: equal_update          # equal_update | equal_generation (required)
      baseline: grpo-n16-m16        # method names, see pods.training.config.method_name (required)
      method: pods-max_variance-n64-m16
      eval_set: gsm8k               # optional when the runs have a single eval set
      grid_s: 1800                  # optional grid spacing in seconds; inferred when absent
      t_max_s: 21600                # optional end of the grid; inferred when absent
      target_accuracy: 0.45         # optional fixed quality target: the `fixed` endpoint
      align: linear                 # optional alignment (ALIGNERS); the authors' multi-GPU
                                    # runs use `nearest`, as their own plots did
      axis: time                    # optional: what the curves are aligned by (AXES); `step`
                                    # reads every "time" of the row in optimiser steps

Summary columns: `endpoint` (pods.study.verdict.ENDPOINTS), its `question` (a | b) and `role`
(primary | secondary); `estimate` with `ci_low` / `ci_high` (a speedup for time endpoints, a
difference of accuracies otherwise), `p_value`, the unadjusted `verdict`, and for primary rows
`p_adjusted` / `verdict_adjusted`; `target_rule` / `target` are the older two-column names of the
same rows (paper 0.99, isotonic 0.99, equal_time end, ...).
"""
from __future__ import annotations

import argparse
import copy
import functools
import math
import os
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd
import yaml

from pods import runs as runfiles
from pods.layout import RUN_GLOB
from pods.study import stats, verdict
from pods.atomic import atomic_write_text
from pods.training.config import parse_method
from pods.registry import Registry
from pods.study.model import load_schema, validate
from pods.training.timing import STEP_PHASES as PHASES

RUN_KEYS = ["benchmark", "hardware", "method", "seed"]
EVAL_COLUMNS = RUN_KEYS + ["step", "train_time_s", "eval_set", "accuracy", "mean_length"]
Z95 = 1.96  # the paper's bands are +-1.96 SEM across seeds
# What a comparison's curves are aligned by -> the evaluation column that says where each
# evaluation lies. `time` (training clock) is the paper's protocol; `step` compares the arms at
# equal optimiser steps (sample efficiency, the protocol of re-implementations that report
# accuracy per step). On the step axis every *_s column of the summary counts steps, the
# decomposition into step efficiency and step cost is left out (steps are the axis itself), and
# the primary endpoints form their own multiplicity family (pods.study.verdict).
AXES = {"time": "train_time_s", "step": "step"}


# --------------------------------------------------------------------------------------------
# Reading run directories
# --------------------------------------------------------------------------------------------
def find_runs(root: str | os.PathLike) -> list[Path]:
    """Every `runs/{benchmark}/{hardware}/{method}/seed{k}` directory under `root`.

    `root` may be the results folder (holding `runs/`) or the `runs/` folder itself.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"runs root {root} does not exist")
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


# --------------------------------------------------------------------------------------------
# Studies
# --------------------------------------------------------------------------------------------
def load_study(path: str | os.PathLike) -> list[dict]:
    """The comparisons of a study file (format in the module docstring), validated."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"study file {path} does not exist")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("comparisons")
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty list of comparisons (or a 'comparisons:' list)")
    return [validate_comparison(c, f"{path}: comparison {i + 1}") for i, c in enumerate(data)]


def validate_comparison(comp: Mapping, where: str = "comparison") -> dict:
    """A study-file row checked once, the way every row is: against the schema's `study_row` (the
    keys a comparison has and what each holds), then its two methods parsed."""
    if not isinstance(comp, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    row = validate(copy.deepcopy(dict(comp)), _schema(), where, definition="study_row")
    for key in ("baseline", "method"):
        try:
            parse_method(row[key])
        except ValueError as exc:
            raise ValueError(f"{where}: {key}: {exc}") from None
    return row


@functools.cache
def _schema() -> dict:
    return load_schema()


def select_eval_set(rows: pd.DataFrame, benchmark: str, eval_set: str | None = None) -> pd.DataFrame:
    """The rows of one eval set: the one named, else the only one, else the benchmark's own."""
    sets = sorted(rows["eval_set"].unique())
    if eval_set is None:
        if len(sets) == 1:
            eval_set = sets[0]
        elif benchmark in sets:
            eval_set = benchmark
        else:
            raise ValueError(f"{benchmark}: runs have eval sets {sets}; name one with eval_set")
    picked = rows[rows["eval_set"] == eval_set]
    if picked.empty:
        raise ValueError(f"{benchmark}: no {eval_set!r} evaluations (have {sets})")
    return picked


def on_axis(rows: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Evaluations placed on `axis`: the grid, the alignment and every time rule read
    `train_time_s`, so the step axis puts the optimiser step there (and nothing else changes)."""
    column = AXES[axis]
    if column == "train_time_s":
        return rows
    if rows[column].isna().any():
        raise ValueError(f"{rows['method'].iloc[0]}: evaluations without a {column!r} cannot be aligned by {axis}")
    return rows.assign(train_time_s=rows[column].astype(float))


def _arm(evals: pd.DataFrame, comp: Mapping, method: str) -> pd.DataFrame:
    rows = evals[(evals["benchmark"] == comp["benchmark"]) & (evals["hardware"] == comp["hardware"])
                 & (evals["method"] == method)]
    if "seeds" in comp:
        rows = rows[rows["seed"].isin(comp["seeds"])]
    if rows.empty:
        raise ValueError(f"no evaluations for {comp['benchmark']}/{comp['hardware']}/{method}")
    return on_axis(select_eval_set(rows, comp["benchmark"], comp.get("eval_set")), comp.get("axis", verdict.DEFAULT_AXIS))


def comparison_grid(comp: Mapping, base: pd.DataFrame, meth: pd.DataFrame) -> np.ndarray:
    how = comp.get("align", DEFAULT_ALIGN)
    if "grid_s" in comp:
        t_max = comp.get("t_max_s")
        if t_max is None:
            t_max = min(default_grid(base, how)[-1], default_grid(meth, how)[-1])
        return regular_grid(float(comp["grid_s"]), float(t_max))
    grid = default_grid(pd.concat([base, meth]), how)
    if "t_max_s" in comp:
        grid = grid[grid <= float(comp["t_max_s"]) + 1e-9]
    return grid


def check_grid_covered(comp: Mapping, grid: np.ndarray, rows: pd.DataFrame, how: str) -> None:
    """Linear alignment interpolates between evaluations and never extrapolates: a fixed grid that
    runs past a seed's last evaluation would leave that seed's curve undefined there (and the
    budget T, the estimand, silently shorter), so it is refused with the way out."""
    if how != "linear":
        return
    last = rows.groupby("seed")["train_time_s"].max()
    if float(grid[-1]) > float(last.min()) + 1e-9:
        seed = last.idxmin()
        raise ValueError(
            f"{comparison_label(comp)}: the grid runs to {grid[-1]:g} s but seed {seed} of "
            f"{rows['method'].iloc[0]} was last evaluated at {last.min():g} s, and linear alignment "
            f"does not extrapolate; set the comparison's t_max_s <= {last.min():g} or align: nearest")


def comparison_label(comp: Mapping) -> str:
    axis = comp.get("axis", verdict.DEFAULT_AXIS)
    by = "" if axis == verdict.DEFAULT_AXIS else f", by {axis}"
    return f"{comp['benchmark']} {comp['design']} ({comp['hardware']}{by}): {comp['method']} vs {comp['baseline']}"


def comparison_arms(comp: Mapping, evals: pd.DataFrame, how: str | None = None
                    ) -> tuple[np.ndarray, verdict.Arm, verdict.Arm, pd.DataFrame, pd.DataFrame]:
    """The grid and both arms of a comparison: each seed's curve on the grid and the optimiser
    steps it had done by each grid time (read off the evaluations' `step`, like the accuracy;
    unknown on the step axis, where the grid is the steps)."""
    how = how or comp.get("align", DEFAULT_ALIGN)
    base, meth = _arm(evals, comp, comp["baseline"]), _arm(evals, comp, comp["method"])
    grid = comparison_grid(comp, base, meth)
    for rows in (base, meth):
        check_grid_covered(comp, grid, rows, how)
    arms = []
    for rows in (base, meth):
        _, curves = seed_matrix(rows, grid, how=how)
        if rows["step"].notna().all() and comp.get("axis", verdict.DEFAULT_AXIS) == "time":
            _, steps = seed_matrix(rows, grid, how=how, value="step")  # read off the grid like the curve
        else:
            steps = np.full_like(curves, np.nan)
        arms.append(verdict.Arm(curves, steps))
    return grid, arms[0], arms[1], base, meth


def check_same_start(comp: Mapping, summaries: pd.DataFrame | None, base: pd.DataFrame, meth: pd.DataFrame) -> None:
    """Both arms of a comparison must start from the same base model (summary.json `provenance`)."""
    if summaries is None or summaries.empty or "provenance" not in summaries:
        return
    keys = {(m, s) for rows in (base, meth) for m, s in zip(rows["method"], rows["seed"])}
    starts: dict[str, list[str]] = {}
    for rec in summaries.to_dict("records"):
        origin = rec.get("provenance")
        if (rec["benchmark"], rec["hardware"]) == (comp["benchmark"], comp["hardware"]) and \
                (rec["method"], rec["seed"]) in keys and isinstance(origin, Mapping):
            starts.setdefault(origin.get("base_model_sha256"), []).append(f"{rec['method']}/seed{rec['seed']}")
    if len(starts) > 1:
        detail = "; ".join(f"{(sha or '?')[:12]}: {', '.join(sorted(runs)[:3])}" for sha, runs in starts.items())
        raise ValueError(f"{comp['benchmark']}/{comp['hardware']}: the runs of {comp['baseline']} vs {comp['method']} "
                         f"start from different base models ({detail}); train them all from one (a fresh results_dir)")


def _arm_timing(times: pd.DataFrame, comp: Mapping, name: str, seeds) -> pd.DataFrame:
    return times[(times["benchmark"] == comp["benchmark"]) & (times["hardware"] == comp["hardware"])
                 & (times["method"] == name) & times["seed"].isin(seeds)]


def _load_check(steps: pd.DataFrame | None, comp: Mapping, base: pd.DataFrame, meth: pd.DataFrame) -> dict:
    """Co-scheduling: each arm's mean load average over its runs' steps (`load_avg_1m` of
    steps.jsonl, where the trainer recorded it) and Welch's p-value for a difference; a small p
    means the arms ran under different machine load, a wall-clock effect the seeds cannot see."""
    if steps is None or steps.empty or "load_avg_1m" not in steps:
        return {}
    per_run = steps.dropna(subset=["load_avg_1m"]).groupby(RUN_KEYS)["load_avg_1m"].mean().reset_index()
    loads = [_arm_timing(per_run, comp, comp[arm], rows["seed"].unique())["load_avg_1m"].to_numpy(float)
             for arm, rows in (("baseline", base), ("method", meth))]
    if min(len(x) for x in loads) < 2:
        return {}
    _, interval = stats.welch(loads[0], loads[1])
    return {"load_baseline": float(loads[0].mean()), "load_method": float(loads[1].mean()),
            "load_p_value": float(interval.p_value)}


def summarize_study(study: Sequence[Mapping], evals: pd.DataFrame, steps: pd.DataFrame | None = None,
                    summaries: pd.DataFrame | None = None, n_boot: int = 2000, seed: int = 0,
                    how: str | None = None, power: bool = True, multiplicity: str = verdict.MULTIPLICITY
                    ) -> pd.DataFrame:
    """One row per (comparison, endpoint) of pods.study.verdict, the primary endpoints adjusted for
    multiplicity over the study; times in seconds, accuracies in [0, 1]. With `power`, an
    undecided primary endpoint gets the seeds per arm at which 80% of studies simulated from its
    fitted population model would decide (pods.study.calibration.seeds_to_decide)."""
    from pods.study import calibration

    times = step_time_table(steps, summaries)
    rows, arms = [], []
    for i, comp in enumerate(study):
        comp = validate_comparison(comp, f"comparison {i + 1}")
        grid, base_arm, meth_arm, base, meth = comparison_arms(comp, evals, how=how)
        check_same_start(comp, summaries, base, meth)
        timing = {}
        for arm, name, rows_ in (("baseline", comp["baseline"], base), ("method", comp["method"], meth)):
            sel = _arm_timing(times, comp, name, rows_["seed"].unique())
            for col in ["s_per_step"] + [f"{p}_s_per_step" for p in PHASES]:
                timing[f"{col}_{arm}"] = float(sel[col].mean()) if len(sel) else np.nan
        later = grid > 0
        common = {
            **({"name": comp["name"]} if "name" in comp else {}),
            "benchmark": comp["benchmark"], "hardware": comp["hardware"], "design": comp["design"],
            "axis": comp.get("axis", verdict.DEFAULT_AXIS),
            "baseline": comp["baseline"], "method": comp["method"], "eval_set": base["eval_set"].iloc[0],
        }
        tail = {
            "peak_baseline": float(np.nanmax(base_arm.curves.mean(axis=0)[later])),
            "peak_method": float(np.nanmax(meth_arm.curves.mean(axis=0)[later])),
            "budget_s": float(grid[-1]), "grid_s": float(grid[1] - grid[0]) if len(grid) > 1 else math.nan,
            "n_seeds_baseline": len(base_arm.curves), "n_seeds_method": len(meth_arm.curves),
            **timing, **_load_check(steps, comp, base, meth),
        }
        fixed = comp.get("target_accuracy")
        for record in verdict.compare(grid, base_arm, meth_arm, n_boot=n_boot, seed=seed, fixed_target=fixed):
            rows.append({**common, **record, **tail, "seeds_to_decide": math.nan})
            arms.append((grid, base_arm, meth_arm, fixed))
    verdict.adjust_family(rows, multiplicity)
    known: dict[tuple, float] = {}
    for row, (grid, base_arm, meth_arm, fixed) in zip(rows, arms):
        if power and row["role"] == "primary" and row["verdict_adjusted"] == "undecided":
            # at the per-test level Bonferroni gives: Holm decides at least what it decides
            key = (*(row[k] for k in verdict.ARM_KEYS), row["axis"], row["endpoint"])
            if key not in known:  # the same pair under another comparison name: same answer
                known[key] = calibration.seeds_to_decide(
                    grid, base_arm.curves, meth_arm.curves, row["endpoint"],
                    stats.ALPHA / verdict.family_size(rows, row["question"], row["axis"]), seed=seed, fixed=fixed)
            row["seeds_to_decide"] = known[key]
    table = pd.DataFrame.from_records(rows)
    return table[[c for c in SUMMARY_COLUMNS if c in table.columns] + [c for c in table.columns if c not in SUMMARY_COLUMNS]]


SUMMARY_COLUMNS = [
    "name", "benchmark", "hardware", "design", "axis", "baseline", "method", "eval_set", "question", "endpoint", "role",
    "target_rule", "target", "target_accuracy", "plateau", "t_baseline_s", "t_method_s", "speedup",
    "accuracy_baseline", "accuracy_method", "accuracy_diff", "estimate", "interval_method", "ci_low", "ci_high",
    "censored", "p_value", "verdict", "p_adjusted", "multiplicity", "verdict_adjusted", "seeds_to_decide",
    "reached_frac", "censored_frac", "steps_baseline", "steps_method", "step_efficiency", "step_efficiency_ci_low",
    "step_efficiency_ci_high", "step_cost_ratio", "step_cost_ratio_ci_low", "step_cost_ratio_ci_high",
]


def read_summary(path: str | os.PathLike) -> pd.DataFrame:
    """A summary.csv, its `target` column as text (0.99 stays "0.99", not a float)."""
    return pd.read_csv(path, dtype={"target": str})


def _fmt(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _seeds_text(value) -> str:
    """seeds_to_decide: inf means "not within the simulated ladder" (pods.study.calibration.LADDER)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        from pods.study.calibration import LADDER

        return f"> {LADDER[-1]}"
    return f"{int(value)}"


def to_markdown(df: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub table; on a time-to-target row an empty time or speedup reads "not reached"."""
    columns = [c for c in (columns or df.columns) if c in df.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for rec in df[columns].to_dict("records"):
        timed = rec.get("target_rule", "paper") in stats.TIME_RULES
        cells = []
        for col in columns:
            val = rec[col]
            if timed and col in ("t_baseline_s", "t_method_s", "speedup") and (val is None or pd.isna(val)):
                cells.append("not reached")
            elif col == "seeds_to_decide":
                cells.append(_seeds_text(val))
            else:
                cells.append(_fmt(val))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _interval_text(estimate, lo, hi, digits: int = 3) -> str:
    if estimate is None or (isinstance(estimate, float) and math.isnan(estimate)):
        return "not reached"
    if lo is None or pd.isna(lo):
        return _fmt(float(estimate), digits)
    return f"{_fmt(float(estimate), digits)} [{_fmt(float(lo), digits)}, {_fmt(float(hi), digits)}]"


def _keys(table: pd.DataFrame) -> list[str]:
    return [k for k in ("name", "benchmark", "hardware", "design", "axis", "baseline", "method") if k in table.columns]


def _one_axis_hidden(df: pd.DataFrame) -> pd.DataFrame:
    """A table whose rows are all on one axis does not print it (the paper's studies: time)."""
    if "axis" in df.columns and df["axis"].nunique() <= 1:
        return df.drop(columns="axis")
    return df


def question_table(table: pd.DataFrame, question: str) -> pd.DataFrame:
    """One row per comparison for one question: its primary endpoint (estimate [95% CI], raw and
    adjusted p, the adjusted decision, seeds to decide) and, for (a), the paper's rule beside it,
    the plateau flag and the decomposition."""
    rows = []
    primary = verdict.PRIMARY[question].name
    keys = _keys(table)
    for key in table[keys].drop_duplicates().itertuples(index=False):  # in the study's order
        row = dict(zip(keys, key))
        part = table[(table[keys] == pd.Series(row)).all(axis=1)]
        by = {r["endpoint"]: r for r in part.to_dict("records")}
        r = by.get(primary)
        if r is None:
            continue
        if question == "a":
            row["plateau"] = r["plateau"]
            paper = by.get("paper_0.99")
            if paper is not None:
                row["paper rule 0.99 (secondary)"] = _interval_text(paper["speedup"], paper["ci_low"], paper["ci_high"])
        row[f"{primary} (primary)"] = _interval_text(r["estimate"], r["ci_low"], r["ci_high"])
        row["p"] = stats.fmt_p(r["p_value"])
        row["p adjusted"] = stats.fmt_p(r.get("p_adjusted"))
        row["verdict (adjusted)"] = r.get("verdict_adjusted", "")
        row["seeds to decide (80% power)"] = _seeds_text(r.get("seeds_to_decide"))
        if question == "a" and _on_time(r):  # on the step axis the steps are the axis itself
            row["step efficiency"] = _interval_text(r.get("step_efficiency"), r.get("step_efficiency_ci_low"),
                                                    r.get("step_efficiency_ci_high"))
            row["step cost ratio"] = _interval_text(r.get("step_cost_ratio"), r.get("step_cost_ratio_ci_low"),
                                                    r.get("step_cost_ratio_ci_high"))
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def verdict_table(table: pd.DataFrame) -> pd.DataFrame:
    """Both questions' primary endpoints, one row per comparison (the README's table)."""
    a, b = question_table(table, "a"), question_table(table, "b")
    if a.empty or b.empty:
        return a if b.empty else b
    keys = _keys(table)
    b = b.rename(columns={c: f"(b) {c}" for c in b.columns if c not in keys})
    a = a.rename(columns={c: f"(a) {c}" for c in a.columns if c not in keys})
    return _one_axis_hidden(a.merge(b, on=keys, how="outer", sort=False))


def secondary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every secondary endpoint, unadjusted: estimate [95% CI], p and its own decision."""
    rows = []
    for rec in table[table["role"] == "secondary"].to_dict("records"):
        rows.append({**{k: rec[k] for k in _keys(table)}, "question": rec["question"], "endpoint": rec["endpoint"],
                     "estimate [95% CI]": _interval_text(rec["estimate"], rec["ci_low"], rec["ci_high"]),
                     "interval": rec["interval_method"], "p": stats.fmt_p(rec["p_value"]),
                     "verdict (unadjusted)": rec["verdict"], "censored": rec.get("censored") or ""})
    return _one_axis_hidden(pd.DataFrame.from_records(rows))


SUMMARY_MD_COLUMNS = ["name", "benchmark", "design", "axis", "baseline", "method", "endpoint", "role", "target_accuracy",
                      "plateau", "t_baseline_s", "t_method_s", "estimate", "ci_low", "ci_high", "interval_method",
                      "p_value", "p_adjusted", "verdict", "verdict_adjusted", "seeds_to_decide", "steps_baseline",
                      "steps_method", "step_efficiency", "step_cost_ratio", "s_per_step_baseline",
                      "s_per_step_method"]


# How a question reads on an axis other than training time (its section title in summary.md).
AXIS_WORDS = {"step": "aligned by optimiser steps (every time a step count)"}


def summary_markdown(table: pd.DataFrame) -> str:
    """summary.md: each question's primary verdicts (adjusted), per axis when the study has more
    than the training clock, the secondary endpoints, every row."""
    parts = []
    axes = list(dict.fromkeys(table["axis"])) if "axis" in table.columns else [verdict.DEFAULT_AXIS]
    for axis in axes:
        part = table[table["axis"] == axis] if "axis" in table.columns else table
        for q, words in verdict.QUESTIONS.items():
            qt = question_table(part, q)
            if qt.empty:
                continue
            e = verdict.PRIMARY[q]
            on = f", {AXIS_WORDS[axis]}" if axis in AXIS_WORDS else ""
            scope = "comparisons" if len(axes) == 1 else "comparisons on this axis"
            parts.append(f"## ({q}) {words}{on}: primary endpoint `{e.name}` ({e.interval} 95% interval; "
                         f"{verdict.MULTIPLICITY}-adjusted over the study's {scope}; docs/verdict.md)\n\n"
                         + to_markdown(_one_axis_hidden(qt)))
    parts.append("## Secondary endpoints (unadjusted, descriptive)\n\n" + to_markdown(secondary_table(table)))
    parts.append("## Every row\n\n" + to_markdown(_one_axis_hidden(table), SUMMARY_MD_COLUMNS))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# Our runs beside the paper's: the decomposition, and projections onto other hardware
# --------------------------------------------------------------------------------------------
DECOMPOSITION_COLUMNS = ["source", "setting", "design", "hardware", "baseline", "method", "target_rule",
                         "speedup", "ci_low", "ci_high", "step_efficiency", "step_efficiency_ci_low",
                         "step_efficiency_ci_high", "step_cost_ratio", "step_cost_ratio_ci_low",
                         "step_cost_ratio_ci_high", "steps_baseline", "steps_method", "s_per_step_baseline",
                         "s_per_step_method", "verdict"]


def _on_time(row: Mapping) -> bool:
    """Speedups are decomposed and projected on the training clock only (a summary written before
    the axis column existed is on it)."""
    axis = row.get("axis")
    return not isinstance(axis, str) or axis == verdict.DEFAULT_AXIS


def _setting(row: Mapping) -> str:
    name = row.get("name")
    if isinstance(name, str) and name not in ("main", ""):
        return name  # the paper's settings are named (gsm8k-l40s, h100x8, ...)
    return f"{row['benchmark']} {row['design']}"


def decomposition_table(ours: pd.DataFrame, paper: pd.DataFrame | None = None,
                        rules: Sequence[tuple[str, str]] = stats.DECOMPOSED) -> pd.DataFrame:
    """speedup = step efficiency / step-cost ratio, per comparison, ours and the paper's."""
    rows = []
    for source, table in (("ours", ours), ("paper", paper)):
        if table is None or table.empty:
            continue
        for rec in table.to_dict("records"):
            if (rec["target_rule"], str(rec["target"])) not in rules or not _on_time(rec):
                continue
            rows.append({"source": source, "setting": _setting(rec), **{c: rec.get(c) for c in DECOMPOSITION_COLUMNS
                                                                        if c not in ("source", "setting")}})
    return pd.DataFrame.from_records(rows, columns=DECOMPOSITION_COLUMNS)


def read_cost_file(path: str | os.PathLike) -> dict:
    """A phase-cost file of `benchmarks/step_time.py --out`: {"hardware": name, "s_per_step":
    {method: seconds}, ...}; checked so that a projection never rests on a malformed file."""
    import json

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cost file {path} does not exist")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg})") from None
    costs = data.get("s_per_step") if isinstance(data, dict) else None
    if not isinstance(costs, dict) or not costs or not isinstance(data.get("hardware"), str):
        raise ValueError(f"{path}: expected {{'hardware': name, 's_per_step': {{method: seconds}}}}")
    for method, value in costs.items():
        parse_method(method)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{path}: s_per_step of {method} must be a positive number, got {value!r}")
    return data


def cost_sources(paper: pd.DataFrame | None, cost_files: Sequence[str | os.PathLike] = ()) -> list[dict]:
    """Step-cost ratios of other hardware: the paper's settings (by design) and the user's files."""
    sources = []
    if paper is not None and not paper.empty:
        for rec in paper.drop_duplicates("name").to_dict("records"):
            if pd.notna(rec["step_cost_ratio"]):
                sources.append({"source": f"paper {rec['name']}", "design": rec["design"], "baseline": None,
                                "method": None, "step_cost_ratio": float(rec["step_cost_ratio"])})
    for path in cost_files:
        data = read_cost_file(path)
        sources.append({"source": f"{data['hardware']} ({Path(path).name})", "design": None,
                        "costs": data["s_per_step"]})
    return sources


PROJECTION_COLUMNS = ["setting", "design", "baseline", "method", "target_rule", "measured_on", "projected_onto",
                      "step_efficiency", "step_efficiency_ci_low", "step_efficiency_ci_high", "step_cost_ratio",
                      "projected_speedup", "projected_ci_low", "projected_ci_high", "kind"]


def projection_table(ours: pd.DataFrame, sources: Sequence[Mapping],
                     rules: Sequence[tuple[str, str]] = stats.DECOMPOSED) -> pd.DataFrame:
    """Our step efficiency / another machine's step-cost ratio: the speedup our task would show
    there. A paper setting projects the comparisons of its design; a cost file every comparison
    whose two methods it timed. Every row says `kind: projection`."""
    rows = []
    for rec in ours.to_dict("records"):
        if (rec["target_rule"], str(rec["target"])) not in rules or pd.isna(rec.get("step_efficiency_ci_low")) \
                or not _on_time(rec):
            continue
        for src in sources:
            if "costs" in src:
                if rec["baseline"] not in src["costs"] or rec["method"] not in src["costs"]:
                    continue
                ratio = src["costs"][rec["method"]] / src["costs"][rec["baseline"]]
            elif src["design"] == rec["design"]:
                ratio = src["step_cost_ratio"]
            else:
                continue
            efficiency = rec["step_efficiency"]
            rows.append({
                "setting": _setting(rec), "design": rec["design"], "baseline": rec["baseline"], "method": rec["method"],
                "target_rule": rec["target_rule"], "measured_on": rec["hardware"], "projected_onto": src["source"],
                "step_efficiency": efficiency, "step_efficiency_ci_low": rec["step_efficiency_ci_low"],
                "step_efficiency_ci_high": rec["step_efficiency_ci_high"], "step_cost_ratio": ratio,
                "projected_speedup": efficiency / ratio if pd.notna(efficiency) else None,
                "projected_ci_low": rec["step_efficiency_ci_low"] / ratio,
                "projected_ci_high": rec["step_efficiency_ci_high"] / ratio, "kind": "projection",
            })
    return pd.DataFrame.from_records(rows, columns=PROJECTION_COLUMNS)


# --------------------------------------------------------------------------------------------
# The verdict's other views: the speedup profile, time-to-target curves, the calibration table
# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# Writing results
# --------------------------------------------------------------------------------------------
def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """`df` as CSV without the index, atomically (`pods.atomic`)."""
    atomic_write_text(path, df.to_csv(index=False))


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
MIN_BOOT = 200  # fewer resamples leave the 2.5% quantiles of the intervals resting on a handful of points


def at_least(minimum: int):
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return check


def _cmd_analyze(args: argparse.Namespace) -> int:
    study = load_study(args.study)
    tables = load_runs(args.runs)
    table = summarize_study(study, tables.evals, tables.steps, tables.summaries, n_boot=args.n_boot, seed=args.seed)
    out = Path(args.out)
    write_csv(table, out)
    atomic_write_text(out.with_suffix(".md"), summary_markdown(table))
    print(to_markdown(verdict_table(table)), end="")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", required=True, help="results folder holding runs/ (or runs/ itself)")
    p.add_argument("--study", required=True, help="YAML list of comparisons (see pods.study.analysis)")
    p.add_argument("--out", default="results/summary.csv", help="CSV path; the .md goes beside it")
    p.add_argument("--n-boot", type=at_least(MIN_BOOT), default=2000,
                   help=f"bootstrap resamples for the intervals (>= {MIN_BOOT})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed")
    p.set_defaults(func=_cmd_analyze)
