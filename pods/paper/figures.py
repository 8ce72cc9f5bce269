"""The paper's figures and tables drawn from imported runs with our own analysis and plots: the
catalogue of figures (`PAPER_FIGURES`), the speedup and ablation tables, and `build_paper_outputs`."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from pods.atomic import atomic_write_text
from pods.paper.release import setting_method, setting_prefix
from pods.study import analysis, plots, verdict
from pods.study.curves import load_runs, mean_curve, regular_grid, time_to_target
from pods.study.tables import summary_markdown, write_csv
from pods.vocabulary import parse_method


# --------------------------------------------------------------------------------------------
# The paper's figures and tables, with our analysis and plots
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PaperFigure:
    """One figure of the paper: which runs, which grid, how its axes read."""

    benchmark: str
    hardware: str
    eval_set: str
    methods: tuple[str, ...]   # the first is the baseline of the speedup
    grid_s: int
    horizon_s: int
    time_unit: str             # "h" or "min"
    xlabel: str
    source: str                # release files behind it, for "missing" reports
    design: str = "equal_update"


_L40S = "Training Time on One L40S (hours)"
_GSM8K_N = tuple(setting_method(None, n, 16) for n in (16, 32, 64, 128, 256))
_GSM8K_M = tuple(setting_method(None, 64, m) for m in (16, 8, 4, 2))
PAPER_FIGURES: dict[str, PaperFigure] = {
    "gsm8k_main": PaperFigure("gsm8k", "l40s-lora", "gsm8k", ("grpo-n16-m16", "pods-max_variance-n64-m16"),
                              1800, 21600, "h", _L40S, "Instruct-GSM8K-512-{16-16,64-16}"),
    "math_main": PaperFigure("math", "l40s-lora", "math500", ("grpo-n8-m8", "pods-max_variance-n32-m8"),
                             1800, 21600, "h", _L40S, "Instruct-MATH-NF-512-{8-8,32-8}"),
    "llama_main": PaperFigure("gsm8k-llama", "l40s-lora", "gsm8k", ("grpo-n16-m16", "pods-max_variance-n64-m16"),
                              600, 5400, "h", _L40S, "Instruct-Llama-512-{16-16,64-16}-0.04"),
    "gsm8k_n_scaling": PaperFigure("gsm8k", "l40s-lora", "gsm8k", _GSM8K_N, 1800, 21600, "h", _L40S,
                                   "Instruct-GSM8K-512-{16,32,64,128,256}-16"),
    "gsm8k_m_scaling": PaperFigure("gsm8k", "l40s-lora", "gsm8k", _GSM8K_M, 1800, 21600, "h", _L40S,
                                   "Instruct-GSM8K-512-64-{16,8,4,2}"),
    "down_sampling_rule": PaperFigure("gsm8k", "l40s-lora", "gsm8k",
                                      ("pods-max_variance-n64-m16", "pods-max_reward-n64-m16", "pods-random-n64-m16"),
                                      1800, 21600, "h", _L40S, "Instruct-GSM8K[-MaxR|-Rand]-512-64-16"),
    "h100s": PaperFigure("gsm8k", "h100x8-zero2", "gsm8k", ("grpo-n32-m32", "pods-max_variance-n128-m32"),
                         120, 1800, "min", "Training Time on 8 H100s (minutes)", "h100s-{acc,length}.csv",
                         "equal_generation"),
    "a100s": PaperFigure("gsm8k", "a100x8-zero2", "gsm8k", ("grpo-n32-m32", "pods-max_variance-n128-m32"),
                         120, 1800, "min", "Training Time on 8 A100s (minutes)", "a100s-{acc,length}.csv",
                         "equal_generation"),
}
# speedups.csv setting -> figure whose first two methods are GRPO and PODS
SPEEDUP_SETTINGS = {"gsm8k-l40s": "gsm8k_main", "math-l40s": "math_main", "llama-l40s": "llama_main",
                    "h100x8": "h100s", "a100x8": "a100s"}
ABLATIONS = {"n_scaling": "gsm8k_n_scaling", "m_scaling": "gsm8k_m_scaling", "rule": "down_sampling_rule"}
ABLATION_TARGET = ("gsm8k_main", 0.99)  # "time to 80.82": 99% of GRPO's peak on GSM8K
ABLATION_TIMES_H = (0.5, 2, 4, 6)
UNIT_S = {"h": 3600.0, "min": 60.0}


TABLES = ("summary.csv", "summary.md", "speedups.csv", "ablations.csv", "curves.csv")


def figure_outputs(out_dir: str | os.PathLike, names: Iterable[str] | None = None,
                   tables_dir: str | os.PathLike | None = None) -> list[Path]:
    """The files `build_paper_outputs` writes for the given figures (all by default)."""
    out_dir = Path(out_dir)
    names = list(PAPER_FIGURES if names is None else names)
    files = [Path(tables_dir or out_dir) / name for name in TABLES]
    for name in names:
        for stem in (name, f"{name}_length"):
            files += [out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"]
    return files


def available_figures(src: str | os.PathLike) -> list[str]:
    """Figures whose release files are all in the local copy `src`."""
    src = Path(src)
    needed = {
        "gsm8k_main": [setting_prefix("GSM8K", None, 16, 16, None), setting_prefix("GSM8K", None, 64, 16, None)],
        "math_main": [setting_prefix("MATH-NF", None, 8, 8, None), setting_prefix("MATH-NF", None, 32, 8, None)],
        "llama_main": [setting_prefix("Llama", None, 16, 16, "0.04"), setting_prefix("Llama", None, 64, 16, "0.04")],
        "gsm8k_n_scaling": [setting_prefix("GSM8K", None, n, 16, None) for n in (16, 32, 64, 128, 256)],
        "gsm8k_m_scaling": [setting_prefix("GSM8K", None, 64, m, None) for m in (16, 8, 4, 2)],
        "down_sampling_rule": [setting_prefix("GSM8K", r, 64, 16, None) for r in (None, "MaxR", "Rand")],
    }
    names = []
    for name in PAPER_FIGURES:
        if name in needed:
            ok = all((src / f"{p}-Run1.json").exists() for p in needed[name])
        else:
            ok = all((src / f"{name}-{kind}.csv").exists() for kind in ("acc", "length"))
        if ok:
            names.append(name)
    return names


def _arm(evals: pd.DataFrame, fig: PaperFigure, method: str) -> pd.DataFrame:
    return evals[(evals["benchmark"] == fig.benchmark) & (evals["hardware"] == fig.hardware)
                 & (evals["method"] == method) & (evals["eval_set"] == fig.eval_set)]


def figure_curves(evals: pd.DataFrame, fig: PaperFigure, value: str = "accuracy") -> dict[str, pd.DataFrame] | None:
    """method -> mean curve on the figure's grid; None when any arm has no runs."""
    grid = regular_grid(fig.grid_s, fig.horizon_s)
    curves = {}
    for method in fig.methods:
        arm = _arm(evals, fig, method)
        if arm.empty:
            return None
        curves[method] = mean_curve(arm, grid, how="nearest", value=value)
    return curves


def paper_step_times(evals: pd.DataFrame, summaries: pd.DataFrame, fig: PaperFigure) -> dict[str, float]:
    """The bar heights the paper shows: the mean over runs of horizon / steps (single GPU), or the
    authors' 1800 x GA / mean wandb _step at 30 min (multi-GPU; see docs/paper.md 4.1)."""
    bars = {}
    for method in fig.methods:
        runs = summaries[(summaries["benchmark"] == fig.benchmark) & (summaries["hardware"] == fig.hardware)
                         & (summaries["method"] == method)]
        if runs.empty:
            continue
        if fig.design == "equal_generation":
            ga = runs["grad_accum"].iloc[0]
            bars[method] = fig.horizon_s * ga / runs["wandb_step_at_horizon"].mean()
        else:
            bars[method] = float(runs["s_per_step"].mean())
    return bars


def _label(method: str, fig: PaperFigure, summaries: pd.DataFrame) -> str:
    label = parse_method(method).label
    if fig.design == "equal_generation":
        ga = summaries.loc[(summaries["hardware"] == fig.hardware) & (summaries["method"] == method), "grad_accum"]
        if len(ga):
            label = label[:-1] + f", GA {int(ga.iloc[0])})"
    return label


def paper_study(evals: pd.DataFrame) -> list[dict]:
    """The comparisons behind the paper's headline speedups, as a study of `pods.study.analysis`
    (each with the figure's eval set and checkpoint grid), for the settings whose runs are there."""
    study = []
    for setting, fig_name in SPEEDUP_SETTINGS.items():
        fig = PAPER_FIGURES[fig_name]
        if figure_curves(evals, fig) is None:
            continue
        study.append({"name": setting, "benchmark": fig.benchmark, "hardware": fig.hardware, "design": fig.design,
                      "baseline": fig.methods[0], "method": fig.methods[1], "eval_set": fig.eval_set,
                      "grid_s": fig.grid_s, "t_max_s": fig.horizon_s,
                      # the authors' own alignment: their 8-GPU evaluations fall between grid points
                      "align": "nearest",
                      # run i of one arm shares nothing with run i of the other that we can verify
                      "pairing": "none"})
    return study


def paper_summary(evals: pd.DataFrame, summaries: pd.DataFrame, n_boot: int = 2000) -> pd.DataFrame:
    """Our summary table (every rule, verdict and decomposition of docs/verdict.md) on the
    authors' settings; their single-GPU s/step is horizon / global step, the 8-GPU one comes
    from the inferred optimiser steps."""
    study = paper_study(evals)
    if not study:
        return pd.DataFrame(columns=analysis.SUMMARY_COLUMNS)
    return analysis.summarize_study(study, evals, None, summaries, n_boot=n_boot)


# the time-to-target endpoints of pods.study.verdict that speedups.csv lists per setting
SPEEDUP_ENDPOINTS = ("paper_0.99", "paper_1.00", "isotonic_0.99")
SPEEDUP_COLUMNS = ["setting", "target_rule", "target", "target_accuracy", "t_grpo", "t_pods", "speedup",
                   "ci_low", "ci_high", "verdict", "unit", "status"]


def speedup_table(summary: pd.DataFrame) -> pd.DataFrame:
    """speedups.csv: time to the target for GRPO and PODS per setting and time rule, in the
    figure's unit and in % accuracy; settings without runs are listed as missing."""
    rows = []
    for setting, fig_name in SPEEDUP_SETTINGS.items():
        fig = PAPER_FIGURES[fig_name]
        scale = UNIT_S[fig.time_unit]
        mine = summary[summary["name"] == setting] if "name" in summary else summary.iloc[0:0]
        for endpoint in SPEEDUP_ENDPOINTS:
            e = verdict.ENDPOINTS[endpoint]
            row = {"setting": setting, "target_rule": e.target_rule, "target": e.target, "unit": fig.time_unit}
            hit = mine[mine["endpoint"] == endpoint] if "endpoint" in mine else mine.iloc[0:0]
            if hit.empty:
                row["status"] = f"missing: {fig.source}"
            else:
                r = hit.iloc[0]
                row.update(target_accuracy=100 * r["target_accuracy"],
                           t_grpo=None if pd.isna(r["t_baseline_s"]) else r["t_baseline_s"] / scale,
                           t_pods=None if pd.isna(r["t_method_s"]) else r["t_method_s"] / scale,
                           speedup=r["speedup"], ci_low=r["ci_low"], ci_high=r["ci_high"], verdict=r["verdict"],
                           status="ok" if pd.notna(r["speedup"]) else "not reached")
            rows.append(row)
    return pd.DataFrame.from_records(rows, columns=SPEEDUP_COLUMNS)


def ablation_table(evals: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    """ablations.csv: accuracy at 0.5/2/4/6 h, peak, s/step, steps and time to GRPO's 99% target."""
    target_fig = PAPER_FIGURES[ABLATION_TARGET[0]]
    target_curves = figure_curves(evals, target_fig)
    rows = []
    for ablation, fig_name in ABLATIONS.items():
        fig = PAPER_FIGURES[fig_name]
        curves = figure_curves(evals, fig)
        if curves is None or target_curves is None:
            rows.append({"ablation": ablation, "method": None, "status": f"missing: {fig.source}"})
            continue
        base = target_curves[target_fig.methods[0]]
        bars = paper_step_times(evals, summaries, fig)
        for method, curve in curves.items():
            tt = time_to_target(base, curve, ABLATION_TARGET[1])
            later = curve["t"] > 0
            runs = summaries[(summaries["benchmark"] == fig.benchmark) & (summaries["hardware"] == fig.hardware)
                             & (summaries["method"] == method)]
            parsed = parse_method(method)
            row = {"ablation": ablation, "method": method, "rule": parsed.rule, "n": parsed.n, "m": parsed.m}
            for hours in ABLATION_TIMES_H:
                at = curve.loc[np.isclose(curve["t"], hours * 3600), "mean"]
                row[f"acc_{hours:g}h"] = 100 * float(at.iloc[0]) if len(at) else None
            row.update(peak=100 * float(curve.loc[later, "mean"].max()), s_per_step=bars.get(method),
                       steps=float(runs["steps"].mean()) if len(runs) else None, target_accuracy=100 * tt.target,
                       t_to_target_h=None if tt.t_method is None else tt.t_method / 3600,
                       status="ok" if tt.t_method is not None else "not reached")
            rows.append(row)
    return pd.DataFrame.from_records(rows)


def build_paper_outputs(runs_root: str | os.PathLike, out_dir: str | os.PathLike,
                        names: Iterable[str] | None = None, tables_dir: str | os.PathLike | None = None) -> dict:
    """Write the figures (PNG + PDF) into out_dir and the tables (TABLES: our summary of the
    authors' settings, speedups.csv, ablations.csv, curves.csv) into tables_dir (default out_dir).

    `names` are the figures to draw (all whose runs were imported by default); a requested figure
    whose runs are absent is an error, an unrequested one is reported missing in the tables.
    """
    out_dir = Path(out_dir)
    evals, _, summaries = load_runs(runs_root)
    drawn, missing, curve_rows = [], [], []
    requested = list(PAPER_FIGURES if names is None else names)
    for name in requested:
        if name not in PAPER_FIGURES:
            raise ValueError(f"unknown paper figure {name!r}; choose from {sorted(PAPER_FIGURES)}")
    for name, fig in PAPER_FIGURES.items():
        curves = figure_curves(evals, fig)
        if curves is None:
            if names is not None and name in requested:
                raise FileNotFoundError(f"figure {name} needs runs imported from {fig.source}")
            missing.append(name)
            continue
        lengths = figure_curves(evals, fig, value="mean_length")
        labels = {m: _label(m, fig, summaries) for m in fig.methods}
        for method in fig.methods:
            for value, table in (("accuracy", curves[method]), ("mean_length", lengths[method])):
                curve_rows.append(table.assign(figure=name, method=method, value=value))
        if name not in requested:
            continue
        bars = paper_step_times(evals, summaries, fig)
        bar_label = ("Seconds per Global Step\n(authors' formula, see docs/paper.md 4.1)"
                     if fig.design == "equal_generation" else "Seconds per Training Step")
        colors = {labels[m]: c for m, c in plots.method_colors(fig.methods).items()}
        scale = UNIT_S[fig.time_unit]
        plots.curve_figure({labels[m]: c for m, c in curves.items()}, out_dir / name, xlabel=fig.xlabel,
                           ylabel="Test Accuracy (%)", time_scale=scale, percent=True,
                           bars={labels[m]: v for m, v in bars.items()}, bar_label=bar_label,
                           xlim=(0, fig.horizon_s / scale), clip=(0, 100), colors=colors)
        plots.curve_figure({labels[m]: c for m, c in lengths.items()}, out_dir / f"{name}_length",
                           xlabel=fig.xlabel, ylabel="Average\nCompletion Length", time_scale=scale,
                           percent=False, xlim=(0, fig.horizon_s / scale), colors=colors)
        drawn.append(name)
    summary = paper_summary(evals, summaries)
    speedups = speedup_table(summary)
    ablations = ablation_table(evals, summaries)
    tables = Path(tables_dir or out_dir)
    write_csv(summary, tables / "summary.csv")
    atomic_write_text(tables / "summary.md", summary_markdown(summary) if len(summary) else "")
    write_csv(speedups, tables / "speedups.csv")
    write_csv(ablations, tables / "ablations.csv")
    curves_table = pd.concat(curve_rows, ignore_index=True) if curve_rows else pd.DataFrame()
    front = ["figure", "method", "value"]
    if not curves_table.empty:
        curves_table = curves_table[front + [c for c in curves_table.columns if c not in front]]
    write_csv(curves_table, tables / "curves.csv")
    return {"figures": drawn, "missing": missing, "speedups": speedups, "ablations": ablations, "summary": summary}


