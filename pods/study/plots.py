"""Every figure, from run metrics only (evals.jsonl, steps.jsonl, summary.json), as PNG + PDF.

The figure functions take mean curves from `pods.study.curves.mean_curve` (columns t, mean, lo, hi)
keyed by legend label, so the paper's figures (`pods.paper`) and our own runs share them.
`pods plot KIND --runs DIR --study FILE --benchmark B --hardware H [--design D] --out STEM` draws
one figure of a study (KIND: accuracy, n_scaling, m_scaling, rule, length, step_time; what each
shows is in `study_methods`); `pods plot all --runs DIR --out FOLDER` draws, for every
(benchmark, hardware, eval set) of the runs:
  accuracy_<benchmark>_<hardware>_<eval_set>   all methods, +-1.96 SEM bands
  length_<...>                                 completion length over time
  n_scaling_<...>, m_scaling_<...>, rule_<...> the ablation families present in the runs
  step_time_<benchmark>_<hardware>             seconds per step split by phase (steps.jsonl)
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pods.study import analysis, stats, verdict  # noqa: E402
from pods.study.curves import (  # noqa: E402
    ALIGNERS,
    DEFAULT_ALIGN,
    RUN_KEYS,
    check_columns,
    default_grid,
    isotonic_fit,
    load_runs,
    mean_curve,
)
from pods.study.expansion import PLOT_KINDS, figure_panels  # noqa: E402
from pods.study.tables import _fmt  # noqa: E402
from pods.vocabulary import DESIGNS, parse_method  # noqa: E402

# Paul Tol's colours as the paper uses them, softened the same way; GRPO first (red)
PALETTE = ["#BB0011", "#1166CC", "#00AA55", "#EE6611", "#AA4499", "#44AA99", "#777777"]
PHASE_COLORS = {"generate": "#1166CC", "update": "#BB0011", "other": "#BBBBBB"}
STYLE = {"lines.linewidth": 2, "lines.markersize": 6, "font.size": 14, "axes.labelsize": 14,
         "legend.fontsize": 12}


def soften(hexcode: str, alpha: float = 0.7) -> str:
    """Blend a colour with white, as the paper's figures do."""
    r, g, b = (int(hexcode[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{int(c * alpha + 255 * (1 - alpha)):02X}" for c in (r, g, b))


def save_figure(fig, stem: str | os.PathLike) -> list[Path]:
    """Write `<stem>.png` and `<stem>.pdf` atomically; close the figure."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        path = stem.with_name(f"{stem.name}.{ext}")
        fd, tmp = tempfile.mkstemp(dir=stem.parent, prefix=f".{path.name}.", suffix=f".{ext}")
        os.close(fd)
        try:
            # no creation date in the PDF: redrawing the same runs gives the same bytes
            fig.savefig(tmp, format=ext, dpi=150, metadata={"CreationDate": None} if ext == "pdf" else None)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        paths.append(path)
    plt.close(fig)
    return paths


def curve_panel(ax, curves: Mapping[str, pd.DataFrame], time_scale: float = 3600.0, percent: bool = True,
                colors: Mapping[str, str] | None = None, clip: tuple[float, float] | None = None) -> None:
    """Mean curves with their +-1.96 SEM bands (where a band exists: 2+ seeds)."""
    factor = 100.0 if percent else 1.0
    for i, (label, curve) in enumerate(curves.items()):
        color = soften((colors or {}).get(label, PALETTE[i % len(PALETTE)]))
        t = curve["t"].to_numpy(float) / time_scale
        ax.plot(t, curve["mean"] * factor, marker="o", color=color, label=label)
        lo, hi = curve["lo"].to_numpy(float) * factor, curve["hi"].to_numpy(float) * factor
        if clip is not None:
            lo, hi = np.clip(lo, *clip), np.clip(hi, *clip)
        ax.fill_between(t, lo, hi, color=color, alpha=0.25, linewidth=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")


def target_panel(ax, marks: Sequence[Mapping], time_scale: float, percent: bool,
                 colors: Mapping[str, str] | None = None) -> None:
    """Each time rule's target line and each arm's crossing, labelled with the seconds exactly as
    summary.md prints them; the isotonic rule's monotone fits as thin lines."""
    factor = 100.0 if percent else 1.0
    for mark in marks:
        linestyle, marker = stats.TIME_RULES[mark["rule"]].style
        y = mark["target"] * factor
        # while the baseline still rises at T its "peak" is only its level at T: say so
        caveat = " (no peak within T: the baseline's level at T)" if mark.get("rising") else ""
        ax.axhline(y, color="#555555", linestyle=linestyle, linewidth=1,
                   label=f"target, {mark['rule']} rule: {_fmt(mark['target'])}{caveat}")
        for i, (label, t) in enumerate(mark["crossings"].items()):
            color = soften((colors or {}).get(label, PALETTE[i % len(PALETTE)]))
            fit = mark.get("fits", {}).get(label)
            if fit is not None:
                ax.plot(fit[0] / time_scale, fit[1] * factor, color=color, linestyle=linestyle, linewidth=1.2)
            if t is None or not math.isfinite(t):
                continue
            ax.plot([t / time_scale], [y], marker=marker, color=color, markeredgecolor="black", markersize=9,
                    linestyle="none")
            ax.annotate(f"{_fmt(t)} s", (t / time_scale, y), textcoords="offset points",
                        xytext=(4, 6 if mark["rule"] == "paper" else -14), fontsize=9)
    ax.legend(loc="best", fontsize=9)


def bar_panel(ax, values: Mapping[str, float], xlabel: str, colors: Mapping[str, str] | None = None) -> None:
    """Horizontal bars, first label on top, so long legend-style labels stay readable."""
    labels = list(values)
    y = np.arange(len(labels))
    ax.barh(y, [values[k] for k in labels],
            color=[soften((colors or {}).get(k, PALETTE[i % len(PALETTE)])) for i, k in enumerate(labels)])
    ax.set_yticks(y, [k.replace(" (", "\n(") for k in labels], fontsize=10)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def curve_figure(curves: Mapping[str, pd.DataFrame], stem: str | os.PathLike, xlabel: str, ylabel: str,
                 time_scale: float = 3600.0, percent: bool = True, bars: Mapping[str, float] | None = None,
                 bar_label: str = "Seconds per Training Step", xlim: tuple[float, float] | None = None,
                 clip: tuple[float, float] | None = None, colors: Mapping[str, str] | None = None,
                 title: str | None = None, marks: Sequence[Mapping] = ()) -> list[Path]:
    """Curves over training time, with a bar panel on the right when `bars` is given and the
    target lines and crossings of `marks` (see `target_panel`)."""
    if not curves:
        raise ValueError(f"no curves to plot for {stem}")
    with plt.rc_context(STYLE):
        if bars:
            fig, (ax, ax_bar) = plt.subplots(1, 2, figsize=(16, 4.5), constrained_layout=True,
                                             gridspec_kw={"width_ratios": [3, 1.2]})
            bar_panel(ax_bar, bars, bar_label, colors)
        else:
            fig, ax = plt.subplots(figsize=(11, 4.5), constrained_layout=True)
        curve_panel(ax, curves, time_scale, percent, colors, clip)
        if marks:
            target_panel(ax, marks, time_scale, percent, colors)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if xlim is not None:
            ax.set_xlim(*xlim)
        if title:
            ax.set_title(title)
        return save_figure(fig, stem)


def phase_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per method: mean seconds per step in generation, update and everything else."""
    check_columns(steps, ["method", "step_s", "generate_s", "update_s"], "steps")
    per_run = steps.groupby(RUN_KEYS)[["step_s", "generate_s", "update_s"]].mean().reset_index()
    table = per_run.groupby("method")[["step_s", "generate_s", "update_s"]].mean()
    return pd.DataFrame({"generate": table["generate_s"], "update": table["update_s"],
                         "other": (table["step_s"] - table["generate_s"] - table["update_s"]).clip(lower=0)})


def phase_bar_figure(table: pd.DataFrame, stem: str | os.PathLike, title: str | None = None) -> list[Path]:
    """Stacked seconds-per-step bars (generation / update / other), one bar per method."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(2.2 + 1.6 * len(table), 4.5), constrained_layout=True)
        x = np.arange(len(table))
        bottom = np.zeros(len(table))
        for phase in ("generate", "update", "other"):
            ax.bar(x, table[phase], bottom=bottom, color=soften(PHASE_COLORS[phase]), label=phase)
            bottom += table[phase].to_numpy(float)
        labels = [parse_method(m).label.replace(" (", "\n(") for m in table.index]
        ax.set_xticks(x, labels, fontsize=9)
        ax.set_ylabel("Seconds per Training Step")
        ax.legend(loc="best")
        if title:
            ax.set_title(title)
        return save_figure(fig, stem)


RULE_COLORS = {"identity": "#BB0011", "max_variance": "#1166CC", "max_reward": "#00AA55", "random": "#EE6611",
               "max_abs_advantage": "#8844AA"}


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """method -> colour, the same in every figure of a set: by rule when each rule appears once
    (GRPO red, max-variance blue, as in the paper), else GRPO first and then by n, then m."""
    parsed = {m: parse_method(m) for m in methods}
    if len({p.rule for p in parsed.values()}) == len(parsed):
        return {m: RULE_COLORS.get(p.rule, PALETTE[i % len(PALETTE)]) for i, (m, p) in enumerate(parsed.items())}
    ordered = sorted(methods, key=lambda m: (not parsed[m].is_grpo, parsed[m].n, -parsed[m].m, m))
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(ordered)}


# ablation kind -> (which methods belong, what they share, what varies along the family)
FAMILY_KINDS = {
    "n_scaling": (lambda p: p.rule in ("identity", "max_variance"), lambda p: f"m{p.m}", lambda p: p.n),
    "m_scaling": (lambda p: p.rule == "max_variance", lambda p: f"n{p.n}", lambda p: -p.m),
    "rule": (lambda p: not p.is_grpo, lambda p: f"n{p.n}_m{p.m}", lambda p: p.rule),
}


def families(methods: Sequence[str]) -> dict[str, list[str]]:
    """The ablation families among `methods` that have 2+ distinct members, e.g.
    {"n_scaling_m16": [grpo-n16-m16, pods-max_variance-n64-m16, ...], "rule_n64_m16": [...]}."""
    out = {}
    for kind, (member, shared, varies) in FAMILY_KINDS.items():
        groups: dict[str, list[str]] = defaultdict(list)
        for name in methods:
            parsed = parse_method(name)
            if member(parsed):
                groups[shared(parsed)].append(name)
        for key, names in groups.items():
            if len({varies(parse_method(n)) for n in names}) >= 2:
                out[f"{kind}_{key}"] = sorted(names, key=lambda n: varies(parse_method(n)))
    return out


def _time_unit(grid: np.ndarray) -> tuple[float, str]:
    span = float(grid[-1]) if len(grid) else 0.0
    if span >= 2 * 3600:
        return 3600.0, "hours"
    if span >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def plot_runs(runs_root: str | os.PathLike, out_dir: str | os.PathLike, how: str | None = None) -> list[Path]:
    """Every figure of the runs under `runs_root` (see the module docstring)."""
    evals, steps, _ = load_runs(runs_root)
    out_dir = Path(out_dir)
    written = []
    for (benchmark, hardware, eval_set), part in evals.groupby(["benchmark", "hardware", "eval_set"]):
        grid = default_grid(part, how)
        scale, unit = _time_unit(grid)
        xlabel = f"Training Time on {hardware} ({unit})"
        methods = sorted(part["method"].unique())
        tag = f"{benchmark}_{hardware}_{eval_set}"
        acc = {m: mean_curve(part[part["method"] == m], grid, how=how) for m in methods}
        length = {m: mean_curve(part[part["method"] == m], grid, how=how, value="mean_length")
                  for m in methods}
        label = {m: parse_method(m).label for m in methods}
        colors = {label[m]: c for m, c in method_colors(methods).items()}
        title = f"{benchmark} on {hardware}, eval {eval_set}"
        written += curve_figure({label[m]: acc[m] for m in methods}, out_dir / f"accuracy_{tag}", xlabel,
                                "Test Accuracy (%)", scale, True, colors=colors, title=title, clip=(0, 100))
        written += curve_figure({label[m]: length[m] for m in methods}, out_dir / f"length_{tag}", xlabel,
                                "Average Completion Length", scale, False, colors=colors, title=title)
        for family, members in families(methods).items():
            written += curve_figure({label[m]: acc[m] for m in members}, out_dir / f"{family}_{tag}", xlabel,
                                    "Test Accuracy (%)", scale, True, colors=colors, clip=(0, 100),
                                    title=f"{title}: {family.replace('_', ' ')}")
    if not steps.empty:
        for (benchmark, hardware), part in steps.groupby(["benchmark", "hardware"]):
            written += phase_bar_figure(phase_table(part), out_dir / f"step_time_{benchmark}_{hardware}",
                                        title=f"{benchmark} on {hardware}")
    return written


def study_methods(study: Sequence[Mapping], kind: str, benchmark: str, hardware: str,
                  design: str | None = None, axis: str | None = None) -> dict[str, set | None]:
    """The methods a study figure shows, baseline first, then the compared methods in study order,
    each with the seeds its comparisons declare (None: every seed on disk).

    accuracy: the `main` comparisons of that design; n_scaling / m_scaling / rule: the
    comparisons of that name; length / step_time: every method of the (benchmark, hardware); any
    other kind is a comparison name: every arm of its comparisons on `axis` (`alternatives`).
    The seeds matter when studies share a runs folder: the ablations' 3 seeds of a run that the
    main study trains with 5 must be drawn as the ablation table counts them.
    """
    rows = [c for c in study if c["benchmark"] == benchmark and c["hardware"] == hardware]
    if kind == "accuracy":
        rows = [c for c in rows if c.get("name", "main") == "main" and (design is None or c["design"] == design)]
    elif kind in FAMILY_KINDS:
        rows = [c for c in rows if c.get("name") == kind]
    elif kind not in ("length", "step_time"):
        rows = [c for c in rows if c.get("name") == kind
                and (axis is None or c.get("axis", verdict.DEFAULT_AXIS) == axis)]
    methods: dict[str, set | None] = {}
    for c in rows:
        seeds = set(c["seeds"]) if "seeds" in c else None
        for m in (c["baseline"], c["method"]):
            known = methods.get(m, set())
            methods[m] = None if seeds is None or known is None else known | seeds
    if not methods:
        raise ValueError(f"the study has no {kind} comparison for {benchmark}/{hardware}"
                         + (f" ({design})" if design else ""))
    return methods


def _declared_seeds(table: pd.DataFrame, methods: Mapping[str, set | None]) -> pd.DataFrame:
    """The rows of `table` (evals or steps) that belong to the methods' declared seeds."""
    keep = pd.Series(False, index=table.index)
    for m, seeds in methods.items():
        rows = table["method"] == m
        keep |= rows if seeds is None else rows & table["seed"].isin(seeds)
    return table[keep]


def target_marks(summary: pd.DataFrame | None, study: Sequence[Mapping], benchmark: str, hardware: str,
                 design: str | None, grid: np.ndarray, curves: Mapping[str, pd.DataFrame]) -> list[dict]:
    """The 0.99 time rules of the figure's single `main` comparison, read from summary.csv (so the
    figure and the table agree to the digit); nothing when the figure shows several comparisons."""
    comps = [c for c in study if c["benchmark"] == benchmark and c["hardware"] == hardware
             and c.get("name", "main") == "main" and (design is None or c["design"] == design)]
    if summary is None or len(comps) != 1:
        return []
    comp = comps[0]
    rows = summary[(summary["benchmark"] == benchmark) & (summary["hardware"] == hardware)
                   & (summary["design"] == comp["design"]) & (summary["baseline"] == comp["baseline"])
                   & (summary["method"] == comp["method"]) & (summary["target"].astype(str) == "0.99")]
    labels = {m: parse_method(m).label for m in (comp["baseline"], comp["method"])}
    marks = []
    for rec in rows.to_dict("records"):
        rule = stats.TIME_RULES.get(rec["target_rule"])
        if rule is None or rule.style is None or pd.isna(rec["target_accuracy"]):
            continue
        times = {labels[comp["baseline"]]: rec["t_baseline_s"], labels[comp["method"]]: rec["t_method_s"]}
        mark = {"rule": rec["target_rule"], "target": float(rec["target_accuracy"]),
                "rising": rec.get("plateau") == "no peak within T",
                "crossings": {k: None if pd.isna(v) else float(v) for k, v in times.items()}}
        if rule.monotone_fits:
            mark["fits"] = {label: (grid, isotonic_fit(curves[label]["mean"].to_numpy(float)))
                            for label in times}
        marks.append(mark)
    return marks


def plot_study_figure(kind: str, runs_root: str | os.PathLike, study: Sequence[Mapping], benchmark: str,
                      hardware: str, stem: str | os.PathLike, design: str | None = None,
                      how: str | None = None, summary: pd.DataFrame | None = None,
                      axis: str = verdict.DEFAULT_AXIS) -> list[Path]:
    """One figure of a study (the Snakemake `plot` rule): `<stem>.png` and `<stem>.pdf`. The
    accuracy figure of one comparison marks its targets and crossings from `summary`; a named
    family's figure (`kind` = its comparison name) is drawn on its `axis`."""
    methods = study_methods(study, kind, benchmark, hardware, design, axis if kind not in PLOT_KINDS else None)
    evals, steps, _ = load_runs(runs_root)
    title = f"{benchmark} on {hardware}" + (f", {design.replace('_', ' ')}" if design else "")
    if kind not in PLOT_KINDS:
        title += f": {kind.replace('_', ' ')}" + (f", by {axis}" if axis != verdict.DEFAULT_AXIS else "")
    colors = {parse_method(m).label: c for m, c in method_colors(methods).items()}
    if kind == "step_time":
        steps = _declared_seeds(steps[(steps["benchmark"] == benchmark) & (steps["hardware"] == hardware)], methods)
        if steps.empty:
            raise ValueError(f"no steps.jsonl records for {benchmark}/{hardware}")
        return phase_bar_figure(phase_table(steps).reindex([m for m in methods if m in set(steps["method"])]),
                                stem, title=title)
    evals = _declared_seeds(evals[(evals["benchmark"] == benchmark) & (evals["hardware"] == hardware)], methods)
    arms = {m: analysis.on_axis(analysis.select_eval_set(evals[evals["method"] == m], benchmark), axis)
            for m in methods}
    comps = [c for c in study if c["benchmark"] == benchmark and c["hardware"] == hardware
             and c.get("name", "main") == "main" and (design is None or c["design"] == design)]
    if kind == "accuracy" and len(comps) == 1:  # the comparison's own grid and alignment, as its summary used
        how = how or comps[0].get("align")
        grid = analysis.comparison_grid({**comps[0], "align": how or DEFAULT_ALIGN},
                                        arms[comps[0]["baseline"]], arms[comps[0]["method"]])
    else:
        grid = default_grid(pd.concat(arms.values()), how)
    scale, unit = _time_unit(grid) if axis in verdict.CLOCKS else (1.0, "")
    value = "mean_length" if kind == "length" else "accuracy"
    curves = {parse_method(m).label: mean_curve(arm, grid, how=how, value=value) for m, arm in arms.items()}
    marks = target_marks(summary, study, benchmark, hardware, design, grid, curves) if kind == "accuracy" else []
    xlabel = ("Optimiser Steps" if axis not in verdict.CLOCKS else f"Training Time on {hardware} ({unit})"
              if axis == "time" else f"Cost Clock on {hardware} ({unit}): steps x measured s/step")
    return curve_figure(curves, stem, xlabel,
                        "Average Completion Length" if kind == "length" else "Test Accuracy (%)",
                        scale, percent=kind != "length", colors=colors, title=title,
                        clip=None if kind == "length" else (0, 100), marks=marks)


FIGURE = "{benchmark}/{hardware}/{kind}{suffix}"  # a study figure's stem under its figures folder


def draw_study_figures(study: Sequence[Mapping], runs_root: str | os.PathLike, figures_dir: str | os.PathLike,
                       summary: pd.DataFrame | None = None) -> list[Path]:
    """Every figure of a study's comparison rows (`figure_panels`), as the workflow's `plots` rule
    draws them: an accuracy figure's suffix is its design, a named family's its axis."""
    written = []
    for kind, benchmark, hardware, suffix in figure_panels(study):
        named = kind not in PLOT_KINDS  # its suffix is the axis, not a design
        written += plot_study_figure(kind, runs_root, study, benchmark, hardware,
                                     Path(figures_dir) / FIGURE.format(benchmark=benchmark, hardware=hardware,
                                                                       kind=kind, suffix=suffix),
                                     design=None if named else suffix[1:] or None, summary=summary,
                                     axis=suffix[1:] if named else "time")
    return written


# --------------------------------------------------------------------------------------------
# Ours beside the paper's: where the speedup comes from, and what it would be elsewhere
# --------------------------------------------------------------------------------------------
DESIGN_COLORS = {"equal_update": "#1166CC", "equal_generation": "#BB0011"}
PAPER_CLAIM = 1.7


def _errors(table: pd.DataFrame, column: str) -> np.ndarray:
    value = table[column].astype(float).to_numpy()
    lo = table[f"{column}_ci_low"].astype(float).to_numpy()
    hi = table[f"{column}_ci_high"].astype(float).to_numpy()
    return np.vstack([np.clip(value - lo, 0, None), np.clip(hi - value, 0, None)])


def _wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters, broken at spaces only (a method name such as
    pods-max_variance-n64-m16 stays whole), existing line breaks kept."""
    return "\n".join(textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False)
                     for line in text.split("\n"))


def _plain_log_ticks(axis, low: float, high: float) -> None:
    """A log axis's ticks as plain numbers (1.5, 2, 3 rather than 2 x 10^0), more of them the
    fewer decades [low, high] spans, so that a short range still reads off its ticks; minor ticks
    unlabelled."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    subs = (1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if decades < 1 else (1.0, 2.0, 5.0) if decades < 3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _log_axes(ax) -> None:
    """Log-log axes with plain numbers (0.5, 1, 2) rather than powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def _speedup_lines(ax, x_range: tuple[float, float], slope_of_speedup: bool) -> None:
    xs = np.geomspace(*x_range, 50)
    for speedup, style, label in ((1.0, "-", "break-even (speedup 1)"),
                                  (PAPER_CLAIM, "--", "the paper's claim (1.7x)")):
        ys = speedup * xs if slope_of_speedup else np.full_like(xs, speedup)
        ax.plot(xs, ys, color="#555555", linestyle=style, linewidth=1, label=label)


def decomposition_figure(table: pd.DataFrame, stem: str | os.PathLike, rule: str = stats.FIGURE_RULE) -> list[Path]:
    """Step-efficiency ratio against step-cost ratio, ours (circles) and the paper's (squares):
    speedup = efficiency / cost, so the straight lines are speedups 1 and 1.7; above them is faster."""
    rows = table[(table["target_rule"] == rule) & table["step_efficiency"].notna()]
    if rows.empty:
        raise ValueError(f"no {rule} rows with a step efficiency to draw in {stem}")
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(9, 6.5), constrained_layout=True)
        for (source, design), part in rows.groupby(["source", "design"], sort=False):
            ax.errorbar(part["step_cost_ratio"], part["step_efficiency"], xerr=_errors(part, "step_cost_ratio"),
                        yerr=_errors(part, "step_efficiency"), fmt="o" if source == "ours" else "s",
                        color=soften(DESIGN_COLORS.get(design, "#777777")), capsize=3, markersize=8,
                        label=f"{'our runs' if source == 'ours' else 'the paper'}, {design}")
            for rec in part.to_dict("records"):
                ax.annotate(rec["setting"], (rec["step_cost_ratio"], rec["step_efficiency"]),
                            textcoords="offset points",
                            xytext=(6, 4), fontsize=9)
        _log_axes(ax)
        lo = min(rows["step_cost_ratio_ci_low"].min(), rows["step_efficiency_ci_low"].min()) * 0.8
        hi = max(rows["step_cost_ratio_ci_high"].max(), rows["step_efficiency_ci_high"].max()) * 1.25
        _speedup_lines(ax, (lo, hi), slope_of_speedup=True)
        ax.set_xlabel("Step-cost ratio (method s/step / baseline s/step)")
        ax.set_ylabel("Step-efficiency ratio\n(baseline steps / method steps to the target)")
        ax.set_title(f"speedup = step efficiency / step cost ({rule} rule, 95% intervals)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="best", fontsize=9)
        return save_figure(fig, stem)


def arms_figure(points: pd.DataFrame, stem: str | os.PathLike) -> list[Path]:
    """Every arm against the study's common baseline (tables.field_arms) on the plane of learning
    per step (y: the gain profile by optimiser steps) against cost per step (x: the step-cost
    ratio), one colour per method and one marker per benchmark, with 95% intervals. On the cost
    clock speedup = y / x, so the straight lines are speedups 1 and 1.7; above them is faster."""
    from pods.study.tables import field_arms

    baseline, methods = field_arms(points.to_dict("records"))
    rows = points[(points["baseline"] == baseline) & points["per_step"].notna() & points["cost"].notna()]
    if rows.empty:  # no arm reached the baseline's levels (a study of a few steps): say so, in place of the plane
        with plt.rc_context(STYLE):
            fig, ax = plt.subplots(figsize=(9, 6.5), constrained_layout=True)
            _no_data(ax, f"arms against {parse_method(baseline).label}",
                     "no arm has both a learning per step and a cost per step: none reached the baseline's levels")
            return save_figure(fig, stem)
    colors = method_colors(methods)
    if len(set(colors.values())) < len(colors):  # a palette that repeats: one distinct colour per arm here
        from matplotlib.colors import to_hex

        colors = {m: to_hex(plt.get_cmap("tab10")(i % 10)) for i, m in enumerate(methods)}
    markers = dict(zip(dict.fromkeys(rows["benchmark"]), "os^Dv<>"))
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(11, 6.5), constrained_layout=True)
        for rec in rows.to_dict("records"):
            one = pd.DataFrame([rec])
            ax.errorbar(one["cost"], one["per_step"], xerr=_errors(one, "cost"), yerr=_errors(one, "per_step"),
                        fmt=markers[rec["benchmark"]], color=soften(colors[rec["method"]]), capsize=3, markersize=8)
        _log_axes(ax)
        x_range = (min(rows["cost_ci_low"].min(), 1.0) * 0.85, max(rows["cost_ci_high"].max(), 1.0) * 1.15)
        _speedup_lines(ax, x_range, slope_of_speedup=True)
        ax.set_xlim(*x_range)
        handles = [plt.Line2D([], [], color=soften(colors[m]), marker="o", linestyle="", markersize=8,
                              label=parse_method(m).label) for m in methods if m in set(rows["method"])]
        handles += [plt.Line2D([], [], color="#777777", marker=marker, linestyle="", markersize=8, label=bench)
                    for bench, marker in markers.items()]
        fig.legend(handles=handles, loc="outside right upper", fontsize=9)  # beside the plane, never on a point
        ax.legend(loc="lower right", fontsize=9)  # the speedup lines
        ax.set_xlabel(f"Cost per step (method s/step / {parse_method(baseline).label} s/step)")
        ax.set_ylabel(f"Learning per step\n(gain profile by optimiser steps, against {parse_method(baseline).label})")
        ax.set_title("speedup = learning per step / cost per step (95% intervals)")
        ax.grid(alpha=0.3, which="both")
        return save_figure(fig, stem)


TITLE_WIDTH = 56  # characters of a panel title's line at its 10 points, in a 6.5-inch panel


def _panels(n: int):
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), constrained_layout=True, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _no_data(ax, label: str, why: str) -> None:
    """A panel that says why a comparison has nothing to draw, rather than a missing panel."""
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=9, wrap=True)
    ax.set_title(_wrap(label, TITLE_WIDTH), fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])


def speedup_profile_figure(profile: pd.DataFrame, stem: str | os.PathLike,
                           labels: Sequence[str] | None = None) -> list[Path]:
    """Per comparison (`labels`, default: those in `profile`), the speedup at every accuracy level
    from the base model to the baseline's final level (pods.study.verdict.speedup_profile), with its
    pointwise 95% band; 1 is no speedup."""
    labels = list(labels) if labels is not None else list(dict.fromkeys(profile["comparison"]))
    if not labels:
        raise ValueError(f"no comparison to draw in {stem}")
    with plt.rc_context(STYLE):
        fig, axes = _panels(len(labels))
        for ax, label in zip(axes, labels):
            part = profile[profile["comparison"] == label]
            if part.empty:
                _no_data(ax, label, "the baseline's fitted curve never rises\nabove its start within T:\n"
                                    "no accuracy level to compare at")
                continue
            x = 100 * part["level"].to_numpy(float)
            ax.plot(x, part["speedup"], marker="o", color=soften(DESIGN_COLORS.get(part["design"].iloc[0], "#444444")))
            ax.fill_between(x, part["ci_low"], part["ci_high"], alpha=0.25, color="#888888", linewidth=0)
            ax.axhline(1.0, color="black", linewidth=1)
            ax.set_yscale("log")
            _plain_log_ticks(ax.yaxis, *ax.get_ylim())
            ax.set_title(_wrap(label, TITLE_WIDTH), fontsize=10)
            ax.set_xlabel("Accuracy level (%)")
            ax.set_ylabel("Speedup (baseline time / method time)")
            ax.grid(alpha=0.3, which="both")
        return save_figure(fig, stem)


CLOCK_LABELS = {"time": "Training time (s)", "cost": "Cost clock (s): steps x measured s/step"}


def time_to_target_figure(curves: Sequence[tuple], stem: str | os.PathLike) -> list[Path]:
    """Per comparison (label, target, arms, and optionally its clock: `time` or `cost`), the
    Kaplan-Meier fraction of seeds that have reached the target by each time on that clock
    (censored at T), baseline and method: the log-rank test's view. A comparison without a target
    (`arms` None: neither fitted curve rises) gets a panel that says so."""
    if not curves:
        raise ValueError(f"no comparison to draw in {stem}")
    with plt.rc_context(STYLE):
        fig, axes = _panels(len(curves))
        for ax, (label, target, arms, *clock) in zip(axes, curves):
            if arms is None:
                _no_data(ax, label, "no target: neither arm's fitted curve\nrises above its start within T")
                continue
            for name, color in (("baseline", "#7f7f7f"), ("method", "#d62728")):
                times, fraction = arms[name]
                ax.step(times, 100 * fraction, where="post", color=color, label=name)
            ax.set_title(f"{_wrap(label, TITLE_WIDTH)}\ntarget {100 * target:.1f}%", fontsize=10)
            ax.set_xlabel(CLOCK_LABELS.get(clock[0] if clock else "time", CLOCK_LABELS["time"]))
            ax.set_ylabel("Seeds at the target (%)")
            ax.set_ylim(-3, 103)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=9)
        return save_figure(fig, stem)


def projection_figure(decomposition: pd.DataFrame, projection: pd.DataFrame, stem: str | os.PathLike,
                      rule: str = stats.FIGURE_RULE) -> list[Path]:
    """Speedup against step-cost ratio: our measured points and the paper's (filled), and our step
    efficiency carried to other machines' cost ratios (hollow, dotted: projections, not measurements)."""
    measured = decomposition[(decomposition["target_rule"] == rule) & decomposition["speedup"].notna()]
    projected = projection[projection["target_rule"] == rule]
    if measured.empty and projected.empty:
        raise ValueError(f"nothing to draw in {stem}")
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(10, 9), constrained_layout=True)
        for (source, design), part in measured.groupby(["source", "design"], sort=False):
            ax.errorbar(part["step_cost_ratio"], part["speedup"], yerr=np.vstack([
                np.clip(part["speedup"] - part["ci_low"], 0, None),
                np.clip(part["ci_high"] - part["speedup"], 0, None)]),
                fmt="o" if source == "ours" else "s", color=soften(DESIGN_COLORS.get(design, "#777777")), capsize=3,
                markersize=8, label=f"measured: {'our runs' if source == 'ours' else 'the paper'}, {design}")
            for rec in part.to_dict("records"):
                ax.annotate(rec["setting"], (rec["step_cost_ratio"], rec["speedup"]), textcoords="offset points",
                            xytext=(6, 4), fontsize=9)
        xs_all = pd.concat([measured["step_cost_ratio"], projected["step_cost_ratio"]]).astype(float)
        x_range = (xs_all.min() * 0.7, xs_all.max() * 1.4)
        xs = np.geomspace(*x_range, 50)
        for (setting, design), part in projected.groupby(["setting", "design"], sort=False):
            color = soften(DESIGN_COLORS.get(design, "#777777"))
            rec = part.iloc[0]
            ax.plot(xs, rec["step_efficiency"] / xs, color=color, linestyle=":", linewidth=1.2)
            ax.fill_between(xs, rec["step_efficiency_ci_low"] / xs, rec["step_efficiency_ci_high"] / xs, color=color,
                            alpha=0.08, linewidth=0)
            ax.errorbar(part["step_cost_ratio"], part["projected_speedup"], yerr=np.vstack([
                np.clip(part["projected_speedup"] - part["projected_ci_low"], 0, None),
                np.clip(part["projected_ci_high"] - part["projected_speedup"], 0, None)]),
                fmt="o", mfc="white", color=color, capsize=3, markersize=8,
                label=_wrap(f"projection: {setting} onto "
                            f"{', '.join(dict.fromkeys(name.split(' (')[0] for name in part['projected_onto']))}", 110))
        _log_axes(ax)
        _speedup_lines(ax, x_range, slope_of_speedup=False)
        ax.set_xlabel("Step-cost ratio (method s/step / baseline s/step)")
        ax.set_ylabel("Speedup to the target")
        ax.set_title(f"Measured and projected speedups ({rule} rule); hollow = projection", fontsize=11)
        ax.grid(alpha=0.3, which="both")
        # below the axes: one line per projected setting names every machine it is carried to
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.12), fontsize=8, ncol=1, frameon=False)
        return save_figure(fig, stem)


def _cmd_plot(args: argparse.Namespace) -> int:
    if args.kind == "all":
        written = plot_runs(args.runs, args.out, how=args.align)
    else:
        if not (args.study and args.benchmark and args.hardware):
            raise ValueError(f"pods plot {args.kind} needs --study, --benchmark and --hardware")
        written = plot_study_figure(args.kind, args.runs, analysis.load_study(args.study), args.benchmark,
                                    args.hardware, args.out, design=args.design, how=args.align)
    print(f"wrote {len(written)} files: {', '.join(str(p) for p in written[:4])}{' ...' if len(written) > 4 else ''}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=PLOT_KINDS + ("all",),
                   help="one study figure, or `all`: every figure of every run under --runs")
    p.add_argument("--runs", required=True, help="results folder holding runs/ (or runs/ itself)")
    p.add_argument("--out", required=True, help="file stem (<out>.png, <out>.pdf); a folder for `all`")
    p.add_argument("--study", help="study YAML (pods.study.analysis) naming the comparisons to draw")
    p.add_argument("--benchmark")
    p.add_argument("--hardware")
    p.add_argument("--design", choices=DESIGNS, help="for `accuracy`: which design's comparisons")
    p.add_argument("--align", default=None, choices=sorted(ALIGNERS),
                   help="how each seed's evaluations are read off the common time grid "
                        f"(default: the comparison's `align`, else {DEFAULT_ALIGN})")
    p.set_defaults(func=_cmd_plot)
