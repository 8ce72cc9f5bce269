"""Curves, time-to-target and speedup tables from run directories.

Everything here is a small pure function over pandas DataFrames in the run schema of
docs/contracts.md, so the same code reads our own runs and the authors' released results once
`pods.paper` has imported them into that schema.

Pipeline, as the claim is stated (PAPER.md 2.3):
  load_evals(root)                  one row per evaluation of every run
  align_to_grid(df, grid)           each seed's curve read off a common time grid
  mean_curve(df, grid)              mean over seeds, +-1.96 SEM band
  time_to_target(base, method)      threshold = r x peak of the baseline's mean curve (t > 0);
                                    time = first grid point (t > 0) whose mean reaches it;
                                    speedup = t_baseline / t_method; None means "not reached"
  bootstrap_speedup(...)            percentile CI, resampling seeds within each arm
  summarize(study, evals, steps)    one row per comparison and target rule

Study file (`pods analyze --study FILE`): YAML, either a list of comparisons or a mapping with a
`comparisons:` list. One comparison:

    - benchmark: gsm8k              # run-directory components (required)
      hardware: l40s-lora
      design: equal_update          # equal_update | equal_generation (required)
      baseline: grpo-n16-m16        # method names, see pods.config.method_name (required)
      method: pods-max_variance-n64-m16
      eval_set: gsm8k               # optional when the runs have a single eval set
      grid_s: 1800                  # optional grid spacing in seconds; inferred when absent
      t_max_s: 21600                # optional end of the grid; inferred when absent

The `rule` column of the summary is the target rule (`0.99` = 99% of the baseline's peak, the
paper's headline; `1.00` = the exact peak) and `threshold` is the resulting target accuracy.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd
import yaml

from pods import runs as runfiles
from pods.config import parse_method
from pods.io import atomic_write_text

RUN_KEYS = ["benchmark", "hardware", "method", "seed"]
EVAL_COLUMNS = RUN_KEYS + ["step", "train_time_s", "eval_set", "accuracy", "mean_length"]
DESIGNS = ("equal_update", "equal_generation")
PHASES = ("generate", "reward", "select", "logprob", "update")
Z95 = 1.96  # the paper's bands are +-1.96 SEM across seeds


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
    runs = sorted(p for p in base.glob("*/*/*/seed*") if p.is_dir())
    if not runs:
        raise FileNotFoundError(f"no run directories ({{benchmark}}/{{hardware}}/{{method}}/seed<k>) under {base}")
    return runs


def run_key(run_dir: str | os.PathLike) -> dict:
    """benchmark, hardware, method and seed, read from the directory path."""
    return runfiles.run_key(run_dir)


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
ALIGNERS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {}


def register_aligner(name: str):
    def wrap(fn):
        ALIGNERS[name] = fn
        return fn
    return wrap


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


def align_to_grid(df: pd.DataFrame, grid: Sequence[float], how: str = "nearest",
                  value: str = "accuracy") -> pd.DataFrame:
    """Each seed's `value` read off `grid` (seconds of train_time_s).

    Returns one row per (group, seed, grid time) with columns [<group keys>, seed, t, value],
    where the group keys are whichever of benchmark/hardware/method/eval_set `df` carries.
    """
    if how not in ALIGNERS:
        raise ValueError(f"unknown alignment {how!r}; choose from {sorted(ALIGNERS)}")
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


def seed_matrix(df: pd.DataFrame, grid: Sequence[float], how: str = "nearest",
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


def mean_curve(df: pd.DataFrame, grid: Sequence[float], how: str = "nearest",
               value: str = "accuracy") -> pd.DataFrame:
    """DataFrame[t, mean, sem, lo, hi, n_seeds] of one arm (one method, benchmark, eval set)."""
    _, matrix = seed_matrix(df, grid, how=how, value=value)
    return curve_from_matrix(grid, matrix)


def default_grid(df: pd.DataFrame) -> np.ndarray:
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
    return regular_grid(min(spacing, t_max) if t_max > 0 else spacing, t_max)


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
# Time to target and speedup
# --------------------------------------------------------------------------------------------
class Target(NamedTuple):
    target: float               # threshold x peak of the baseline's mean curve over t > 0
    t_baseline: float | None    # first grid time > 0 where the baseline's mean reaches it
    t_method: float | None      # same for the method; None = not reached
    speedup: float | None       # t_baseline / t_method; None when either is not reached


def first_time_reaching(t: np.ndarray, y: np.ndarray, target: float) -> float | None:
    """First t > 0 with y >= target (t = 0 is the shared base model, never a finish line)."""
    hits = np.flatnonzero((t > 0) & (y >= target))
    return float(t[hits[0]]) if hits.size else None


def _time_to_target_arrays(t: np.ndarray, y_base: np.ndarray, y_method: np.ndarray,
                           threshold: float) -> Target:
    later = (t > 0) & ~np.isnan(y_base)
    if not later.any():
        raise ValueError("baseline curve has no point after t = 0")
    target = threshold * float(np.max(y_base[later]))
    t_b = first_time_reaching(t, y_base, target)
    t_m = first_time_reaching(t, y_method, target)
    speedup = t_b / t_m if t_b is not None and t_m is not None else None
    return Target(target, t_b, t_m, speedup)


def time_to_target(baseline_curve: pd.DataFrame, method_curve: pd.DataFrame,
                   threshold: float = 0.99) -> Target:
    """PAPER.md 2.3 on two mean curves (DataFrames with columns t, mean) on the same grid."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    check_columns(baseline_curve, ["t", "mean"], "baseline curve")
    check_columns(method_curve, ["t", "mean"], "method curve")
    t = baseline_curve["t"].to_numpy(float)
    if not np.array_equal(t, method_curve["t"].to_numpy(float)):
        raise ValueError("baseline and method curves are on different grids")
    return _time_to_target_arrays(t, baseline_curve["mean"].to_numpy(float),
                                  method_curve["mean"].to_numpy(float), threshold)


def bootstrap_speedup(baseline_df: pd.DataFrame, method_df: pd.DataFrame, grid: Sequence[float],
                      threshold: float = 0.99, n_boot: int = 2000, ci: float = 0.95, seed: int = 0,
                      how: str = "nearest", value: str = "accuracy") -> dict:
    """Percentile CI of the speedup, resampling seeds with replacement within each arm.

    A replicate whose method curve never reaches the target counts as speedup 0 (it did not get
    there within the budget): leaving such replicates out would report an interval above 1 for a
    method that misses the target in half of them. `reached_frac` says how many reached it. (The
    baseline always reaches its own target: the target is a fraction of its own peak.)
    """
    grid = np.asarray(grid, dtype=float)
    _, base = seed_matrix(baseline_df, grid, how=how, value=value)
    _, meth = seed_matrix(method_df, grid, how=how, value=value)
    rng = np.random.default_rng(seed)
    base_means = np.nanmean(base[rng.integers(0, len(base), (n_boot, len(base)))], axis=1)
    meth_means = np.nanmean(meth[rng.integers(0, len(meth), (n_boot, len(meth)))], axis=1)
    replicates = [_time_to_target_arrays(grid, b, m, threshold).speedup for b, m in zip(base_means, meth_means)]
    reached = np.array([s is not None for s in replicates])
    speedups = np.array([0.0 if s is None else s for s in replicates])
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(speedups, [alpha, 1 - alpha])
    return {"ci_low": float(lo), "ci_high": float(hi), "n_boot": n_boot, "reached_frac": float(reached.mean())}


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
COMPARISON_KEYS = ("benchmark", "hardware", "design", "baseline", "method")


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
    if not isinstance(comp, Mapping):
        raise ValueError(f"{where}: expected a mapping")
    missing = [k for k in COMPARISON_KEYS if k not in comp]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    if comp["design"] not in DESIGNS:
        raise ValueError(f"{where}: design {comp['design']!r} not in {DESIGNS}")
    for key in ("baseline", "method"):
        try:
            parse_method(comp[key])
        except ValueError as exc:
            raise ValueError(f"{where}: {key}: {exc}") from None
    return dict(comp)


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


def _arm(evals: pd.DataFrame, comp: Mapping, method: str) -> pd.DataFrame:
    rows = evals[(evals["benchmark"] == comp["benchmark"]) & (evals["hardware"] == comp["hardware"])
                 & (evals["method"] == method)]
    if "seeds" in comp:
        rows = rows[rows["seed"].isin(comp["seeds"])]
    if rows.empty:
        raise ValueError(f"no evaluations for {comp['benchmark']}/{comp['hardware']}/{method}")
    return select_eval_set(rows, comp["benchmark"], comp.get("eval_set"))


def comparison_grid(comp: Mapping, base: pd.DataFrame, meth: pd.DataFrame) -> np.ndarray:
    if "grid_s" in comp:
        t_max = comp.get("t_max_s")
        if t_max is None:
            t_max = min(default_grid(base)[-1], default_grid(meth)[-1])
        return regular_grid(float(comp["grid_s"]), float(t_max))
    grid = default_grid(pd.concat([base, meth]))
    if "t_max_s" in comp:
        grid = grid[grid <= float(comp["t_max_s"]) + 1e-9]
    return grid


def summarize(study: Sequence[Mapping], evals: pd.DataFrame, steps: pd.DataFrame | None = None,
              summaries: pd.DataFrame | None = None, thresholds: Sequence[float] = (0.99, 1.0),
              n_boot: int = 1000, seed: int = 0, how: str = "nearest") -> pd.DataFrame:
    """One row per (comparison, target rule); times in seconds, accuracies in [0, 1]."""
    times = step_time_table(steps, summaries)
    rows = []
    for i, comp in enumerate(study):
        comp = validate_comparison(comp, f"comparison {i + 1}")
        base, meth = _arm(evals, comp, comp["baseline"]), _arm(evals, comp, comp["method"])
        grid = comparison_grid(comp, base, meth)
        base_curve = mean_curve(base, grid, how=how)
        meth_curve = mean_curve(meth, grid, how=how)
        later = base_curve["t"] > 0
        timing = {}
        for arm, name in (("baseline", comp["baseline"]), ("method", comp["method"])):
            sel = times[(times["benchmark"] == comp["benchmark"]) & (times["hardware"] == comp["hardware"])
                        & (times["method"] == name)]
            for col in ["s_per_step"] + [f"{p}_s_per_step" for p in PHASES]:
                timing[f"{col}_{arm}"] = float(sel[col].mean()) if len(sel) else np.nan
        for threshold in thresholds:
            tt = time_to_target(base_curve, meth_curve, threshold)
            boot = bootstrap_speedup(base, meth, grid, threshold, n_boot=n_boot, seed=seed, how=how)
            rows.append({
                **({"name": comp["name"]} if "name" in comp else {}),
                "benchmark": comp["benchmark"], "hardware": comp["hardware"], "design": comp["design"],
                "baseline": comp["baseline"], "method": comp["method"],
                "eval_set": base["eval_set"].iloc[0], "rule": f"{threshold:.2f}",
                "threshold": tt.target, "t_baseline_s": tt.t_baseline, "t_method_s": tt.t_method,
                "speedup": tt.speedup, "ci_low": boot["ci_low"], "ci_high": boot["ci_high"],
                "reached_frac": boot["reached_frac"],
                "peak_baseline": float(base_curve.loc[later, "mean"].max()),
                "peak_method": float(meth_curve.loc[later, "mean"].max()),
                "n_seeds_baseline": int(base["seed"].nunique()), "n_seeds_method": int(meth["seed"].nunique()),
                **timing,
            })
    return pd.DataFrame.from_records(rows)


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not reached" if value is None else ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def to_markdown(df: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub table; empty time cells in the time-to-target columns read "not reached"."""
    columns = list(columns or df.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for rec in df[columns].to_dict("records"):
        cells = []
        for col in columns:
            val = rec[col]
            if col in ("t_baseline_s", "t_method_s", "speedup") and (val is None or pd.isna(val)):
                cells.append("not reached")
            else:
                cells.append(_fmt(val))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


SUMMARY_MD_COLUMNS = ["benchmark", "hardware", "design", "baseline", "method", "rule", "threshold",
                      "t_baseline_s", "t_method_s", "speedup", "ci_low", "ci_high", "peak_baseline",
                      "peak_method", "s_per_step_baseline", "s_per_step_method"]


# --------------------------------------------------------------------------------------------
# Writing results
# --------------------------------------------------------------------------------------------
def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write text to `path` atomically (temp file in the same folder, fsync, os.replace)."""
    atomic_write_text(path, text)


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    write_atomic(path, df.to_csv(index=False))


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def _cmd_analyze(args: argparse.Namespace) -> int:
    study = load_study(args.study)
    tables = load_runs(args.runs)
    table = summarize(study, tables.evals, tables.steps, tables.summaries,
                      thresholds=args.thresholds, n_boot=args.n_boot, seed=args.seed)
    out = Path(args.out)
    write_csv(table, out)
    # the comparison's name tells apart rows over the same runs (an ablation and the main study)
    name = ["name"] if "name" in table.columns else []
    write_atomic(out.with_suffix(".md"), to_markdown(table, name + SUMMARY_MD_COLUMNS))
    print(to_markdown(table, name + ["benchmark", "hardware", "baseline", "method", "rule", "t_baseline_s",
                                     "t_method_s", "speedup"]), end="")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", required=True, help="results folder holding runs/ (or runs/ itself)")
    p.add_argument("--study", required=True, help="YAML list of comparisons (see pods.analysis)")
    p.add_argument("--out", default="results/summary.csv", help="CSV path; the .md goes beside it")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.99, 1.0],
                   help="target = threshold x the baseline's peak mean accuracy")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates for the CI")
    p.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed")
    p.set_defaults(func=_cmd_analyze)
