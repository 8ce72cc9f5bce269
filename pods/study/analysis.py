"""A study's comparisons read off run directories: time-to-target, verdicts and speedup tables.

Everything here is a small pure function over pandas DataFrames in the run schema of
docs/contracts.md, so the same code reads our own runs and the authors' released results once
`pods.paper` has imported them into that schema. The rules that decide a comparison are
declared and justified in docs/verdict.md.

Pipeline:
  curves.load_runs(root)            every run directory, checked (pods.runs), as three tables
  curves.align_to_grid(df, grid)    each seed's curve read off a common time grid (linear
                                    interpolation between evaluations by default)
  curves.mean_curve(df, grid)       mean over seeds, +-1.96 SEM band
  comparison_arms(comp, evals)      both arms' curves and optimiser-step counts on the grid
  verdict.compare(...)              every endpoint: estimate, calibrated interval, p, decision,
                                    plateau flag, and speedup = step efficiency / step-cost ratio
  summarize_study(study, evals, steps)  one row per (comparison, endpoint) -> summary.csv, the
                                    primary endpoints adjusted for multiplicity over the study
  tables.verdict_table(summary)     one row per comparison, both questions -> summary.md, README

Study file (`pods analyze --study FILE`): YAML, either a list of comparisons or a mapping with a
`comparisons:` list. One comparison:

    - benchmark: gsm8k              # run-directory components (required)
      hardware: l40s-lora
      design: equal_update          # equal_update | equal_generation (required)
      baseline: grpo-n16-m16        # method names, see pods.vocabulary.method_name (required)
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
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from pods.atomic import atomic_write_text
from pods.runs import run_key
from pods.study import stats, verdict
from pods.study.curves import (
    AXES,
    DEFAULT_ALIGN,
    RUN_KEYS,
    default_grid,
    find_runs,
    load_runs,
    regular_grid,
    seed_matrix,
    step_time_table,
)
from pods.study.schema import load_schema, validate
from pods.study.tables import summary_markdown, to_markdown, verdict_table, write_csv
from pods.vocabulary import STEP_PHASES as PHASES
from pods.vocabulary import parse_method

# --------------------------------------------------------------------------------------------
# Studies
# --------------------------------------------------------------------------------------------
STUDY_FILE = "results/study.yaml"  # the default study's, which the workflow writes from its config


def load_study(path: str | os.PathLike) -> list[dict]:
    """The comparisons of a study file (format in the module docstring), validated. A workflow
    config given in its place (`snakemake --configfile`'s, whose comparisons expand into a study
    file's) is named as one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"study file {path} does not exist (--study takes the comparisons file the workflow "
                                f"writes, e.g. {STUDY_FILE})")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        if is_workflow_config(data):
            raise ValueError(f"{path} is a workflow config (snakemake --configfile), not a study file: --study takes "
                             f"the comparisons file the workflow writes from it, e.g. {STUDY_FILE}")
        data = data.get("comparisons")
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty list of comparisons (or a 'comparisons:' list)")
    return [validate_comparison(c, f"{path}: comparison {i + 1}") for i, c in enumerate(data)]


def is_workflow_config(data: Mapping) -> bool:
    """Whether a YAML mapping is a study config of the workflow (keys of config/schema.yaml beside
    `comparisons`, or comparisons in its form: `benchmarks` and `methods` lists) rather than a study file."""
    config_keys = set(_schema()["properties"]) - {"comparisons"}
    rows = data.get("comparisons")
    rows = rows if isinstance(rows, list) else []
    return bool(config_keys & set(data)) or any(isinstance(row, Mapping) and ("benchmarks" in row or "methods" in row)
                                                for row in rows)


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
    return on_axis(select_eval_set(rows, comp["benchmark"], comp.get("eval_set")), comp.get("axis",
                                                                                            verdict.DEFAULT_AXIS))


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
    if comparison_paired(comp):  # seed i against seed i: both arms must have the same seeds
        seeds_b, seeds_m = set(base["seed"]), set(meth["seed"])
        if seeds_b != seeds_m:
            raise ValueError(f"{comparison_label(comp)}: paired by seed, but seeds {sorted(seeds_b ^ seeds_m)} "
                             "have a run in one arm only; train them for both arms, or set pairing: none for "
                             "runs that share nothing by seed")
    arms = []
    for rows in (base, meth):
        _, curves = seed_matrix(rows, grid, how=how)   # rows in seed order
        if rows["step"].notna().all() and comp.get("axis", verdict.DEFAULT_AXIS) in verdict.CLOCKS:
            _, steps = seed_matrix(rows, grid, how=how, value="step")  # read off the grid like the curve
        else:
            steps = np.full_like(curves, np.nan)
        arms.append(verdict.Arm(curves, steps))
    return grid, arms[0], arms[1], base, meth


def comparison_paired(comp: Mapping) -> bool:
    """Whether a comparison pairs its arms by seed (`pairing`, default `seed`: docs/verdict.md)."""
    return comp.get("pairing", "seed") == "seed"


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
    multiplicity over the study; times in seconds, accuracies in [0, 1]. With `power`, every
    primary endpoint gets its a-priori seed count (`apriori_power`)."""
    times = step_time_table(steps, summaries)
    rows = []
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
        paired = comparison_paired(comp)
        cost_log_se = step_cost_log_se(comp, summaries) if comp.get("axis") == "cost" else 0.0
        for record in verdict.compare(grid, base_arm, meth_arm, n_boot=n_boot, seed=seed, fixed_target=fixed,
                                      paired=paired, cost_log_se=cost_log_se):
            rows.append({**common, **record, **tail})
    verdict.adjust_family(rows, multiplicity)
    if power:
        for row in rows:
            row.update(apriori_power(row))
    table = pd.DataFrame.from_records(rows)
    return table[[c for c in SUMMARY_COLUMNS if c in table.columns]
                 + [c for c in table.columns if c not in SUMMARY_COLUMNS]]


def step_cost_log_se(comp: Mapping, summaries: pd.DataFrame | None) -> float:
    """The standard error of log(c_method / c_baseline) on the cost clock, from the `pods cost`
    errors the arms' runs recorded (summary.json `step_cost_s`, `step_cost_se`): the delta method,
    the two measurements independent. 0 where the runs recorded none."""
    if summaries is None or summaries.empty or "step_cost_se" not in summaries:
        return 0.0
    total = 0.0
    for name in (comp["baseline"], comp["method"]):
        rows = summaries[(summaries["benchmark"] == comp["benchmark"]) & (summaries["hardware"] == comp["hardware"])
                         & (summaries["method"] == name)]
        c, se = rows["step_cost_s"].astype(float), rows["step_cost_se"].astype(float)
        if c.notna().any() and se.notna().any():
            total += float((se / c).dropna().iloc[0]) ** 2
    return math.sqrt(total)


def apriori_power(row: Mapping) -> dict:
    """Seeds (pairs when paired) a study needs for 80% power at the primary's declared minimum
    effect (never the observed one), planning with this study's per-seed SD (`unit_sd`) and with
    its one-sided 80% upper confidence bound (docs/verdict.md, "Power before the data"): the
    design stage of the next study, not a verdict on this one. Empty for secondary rows."""
    from pods.study import calibration

    e = verdict.ENDPOINTS[row["endpoint"]]
    if row.get("role") != "primary" or e.minimum_effect is None:
        return {}
    sd, k = row.get("unit_sd", math.nan), min(row["n_seeds_baseline"], row["n_seeds_method"])
    paired = row.get("pairing") == "seed"
    df = k - 1 if paired else 2 * k - 2
    return {"minimum_effect": math.exp(e.minimum_effect) if e.log_scale else e.minimum_effect,
            "seeds_for_power": calibration.seeds_for_power(sd, e.minimum_effect, paired=paired),
            "seeds_for_power_upper": calibration.seeds_for_power(calibration.sd_upper(sd, df), e.minimum_effect,
                                                                 paired=paired)}


SUMMARY_COLUMNS = [
    "name", "benchmark", "hardware", "design", "axis", "baseline", "method", "eval_set", "question", "endpoint", "role",
    "target_rule", "target", "target_accuracy", "plateau", "t_baseline_s", "t_method_s", "speedup",
    "accuracy_baseline", "accuracy_method", "accuracy_diff", "estimate", "interval_method", "ci_low", "ci_high",
    "pairing", "censored", "p_value", "verdict", "p_adjusted", "multiplicity", "verdict_adjusted", "minimum_effect",
    "seeds_for_power", "seeds_for_power_upper", "unit_sd",
    "reached_frac", "censored_frac", "steps_baseline", "steps_method", "step_efficiency", "step_efficiency_ci_low",
    "step_efficiency_ci_high", "step_cost_ratio", "step_cost_ratio_ci_low", "step_cost_ratio_ci_high",
]


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


def study_run_dirs(study: Sequence[Mapping], root: str | os.PathLike) -> list[Path]:
    """The run directories under `root` that the study's comparisons read: their benchmark,
    hardware and both arms, at the row's seeds where it names them. Only these are read and
    checked, so a batch still training beside the finished ones (a confirmation's next look, a
    study's other rows) neither stops nor enters the analysis."""
    wanted = [(c["benchmark"], c["hardware"], arm, set(c.get("seeds") or []))
              for c in study for arm in (c["baseline"], c["method"])]
    keep = []
    for run_dir in find_runs(root):
        key = run_key(run_dir)
        if any((key["benchmark"], key["hardware"], key["method"]) == (b, h, m) and (not seeds or key["seed"] in seeds)
               for b, h, m, seeds in wanted):
            keep.append(run_dir)
    return keep


def _cmd_analyze(args: argparse.Namespace) -> int:
    problems = []  # both inputs checked before any compute, every problem said in the one line
    if not Path(args.runs).is_dir():
        problems.append(f"runs folder {args.runs} does not exist (--runs takes a results folder holding runs/, "
                        f"e.g. results)")
    try:
        study = load_study(args.study)
    except (ValueError, FileNotFoundError) as exc:
        problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    tables = load_runs(study_run_dirs(study, args.runs))
    table = summarize_study(study, tables.evals, tables.steps, tables.summaries, n_boot=args.n_boot, seed=args.seed)
    out = Path(args.out)
    write_csv(table, out)
    atomic_write_text(out.with_suffix(".md"), summary_markdown(table))
    print(to_markdown(verdict_table(table)), end="")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", required=True, help="results folder holding runs/ (or runs/ itself)")
    p.add_argument("--study", required=True,
                   help=f"the study file: YAML list of comparisons (see pods.study.analysis), e.g. {STUDY_FILE} as "
                        f"the workflow writes it; not a workflow config")
    p.add_argument("--out", default="results/summary.csv", help="CSV path; the .md goes beside it")
    p.add_argument("--n-boot", type=at_least(MIN_BOOT), default=2000,
                   help=f"bootstrap resamples for the intervals (>= {MIN_BOOT})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap RNG seed")
    p.set_defaults(func=_cmd_analyze)
