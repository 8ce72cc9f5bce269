"""What a study's summary looks like written down: summary.md's tables (the verdict per question,
the secondary endpoints, every row), the decomposition of our speedups beside the paper's, their
projections onto other hardware, and CSV output."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from pods.atomic import atomic_write_text
from pods.study import stats, verdict
from pods.vocabulary import parse_method


def read_summary_table(path: str | os.PathLike) -> pd.DataFrame:
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
    """A seed count for 80% power: inf means "more than a thousand" (pods.study.calibration.seeds_for_power)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "> 1000"
    return f"{int(value)}"


SEED_COUNT_COLUMNS = ("seeds_for_power", "seeds_for_power_upper")


def to_markdown(df: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """A GitHub table; on a time-to-target row an empty time or speedup reads "not reached" (on a
    row whose status says its data is missing, it stays empty: nothing was measured)."""
    columns = [c for c in (columns or df.columns) if c in df.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for rec in df[columns].to_dict("records"):
        timed = (rec.get("target_rule", "paper") in stats.TIME_RULES
                 and not str(rec.get("status") or "").startswith("missing"))
        cells = []
        for col in columns:
            val = rec[col]
            if timed and col in ("t_baseline_s", "t_method_s", "speedup") and (val is None or pd.isna(val)):
                cells.append("not reached")
            elif col in SEED_COUNT_COLUMNS:
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
        # a-priori: at the declared minimum effect, this study's SD (and its 80% upper bound)
        row["seeds for 80% power at the minimum effect (upper SD)"] = (
            f"{_seeds_text(r.get('seeds_for_power'))} ({_seeds_text(r.get('seeds_for_power_upper'))})"
            if r.get("seeds_for_power") is not None and not pd.isna(r.get("seeds_for_power")) else "")
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


def field_points(table: pd.DataFrame) -> pd.DataFrame:
    """One row per pair of arms on the clock (not the step axis), in the study's order, with the
    numbers of "PODS beside the field": (a)'s primary, the gain profile (`speedup`, its interval and
    Holm-adjusted decision); learning per step, the same pair's gain profile aligned by optimiser
    steps (its `axis: step` row; a study without one: the clock row's step efficiency, baseline steps
    / method steps to the same accuracy); cost per step, the step-cost ratio (method s/step /
    baseline s/step), so on the cost clock speedup = learning per step / cost per step; and (b)'s
    primary. Every number a column of the study's summary.csv."""
    keys = _keys(table)
    on_clock = table[table.apply(_on_time, axis=1)] if "axis" in table.columns else table
    by_steps = {}
    if "axis" in table.columns:
        pair = [k for k in keys if k != "axis"]
        for r in table[(table["axis"] == "step") & (table["endpoint"] == verdict.PRIMARY["a"].name)].to_dict("records"):
            by_steps[tuple(r[k] for k in pair)] = r
    rows, seen = [], set()
    for key in on_clock[keys].drop_duplicates().itertuples(index=False):
        row = dict(zip(keys, key))
        pair = tuple(row.get(k) for k in ("benchmark", "hardware", "design", "baseline", "method"))
        if pair in seen:  # the same two arms under a second comparison name (the ablations' PODS 64 -> 16)
            continue
        part = on_clock[(on_clock[keys] == pd.Series(row)).all(axis=1)]
        by = {r["endpoint"]: r for r in part.to_dict("records")}
        a, b = by.get(verdict.PRIMARY["a"].name), by.get(verdict.PRIMARY["b"].name)
        if a is None or b is None:
            continue
        seen.add(pair)
        step = by_steps.get(tuple(row[k] for k in keys if k != "axis"))
        per_step = ((step["estimate"], step["ci_low"], step["ci_high"]) if step is not None else
                    (a.get("step_efficiency"), a.get("step_efficiency_ci_low"), a.get("step_efficiency_ci_high")))
        rows.append({
            "benchmark": row["benchmark"], "hardware": row.get("hardware"), "baseline": row["baseline"],
            "method": row["method"],
            "speedup": a["estimate"], "speedup_ci_low": a["ci_low"], "speedup_ci_high": a["ci_high"],
            "speedup_verdict": a.get("verdict_adjusted", ""),
            "per_step": per_step[0], "per_step_ci_low": per_step[1], "per_step_ci_high": per_step[2],
            "cost": a.get("step_cost_ratio"), "cost_ci_low": a.get("step_cost_ratio_ci_low"),
            "cost_ci_high": a.get("step_cost_ratio_ci_high"),
            "accuracy": b["estimate"], "accuracy_ci_low": b["ci_low"], "accuracy_ci_high": b["ci_high"],
            "accuracy_verdict": b.get("verdict_adjusted", ""),
        })
    return pd.DataFrame.from_records(rows)


def field_table(table: pd.DataFrame) -> pd.DataFrame:
    """The README's "PODS beside the field": `field_points` as text, each number with its 95%
    interval."""
    rows = []
    for r in field_points(table).to_dict("records"):
        rows.append({
            "benchmark": r["benchmark"],
            "method": parse_method(r["method"]).label,
            "against": parse_method(r["baseline"]).label,
            "wall-clock speedup [95% CI]": _interval_text(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
            "(a) decision": r["speedup_verdict"],
            "learning per step [95% CI]": _interval_text(r["per_step"], r["per_step_ci_low"], r["per_step_ci_high"]),
            "cost per step [95% CI]": _interval_text(r["cost"], r["cost_ci_low"], r["cost_ci_high"]),
            "mean accuracy difference [95% CI]": _interval_text(r["accuracy"], r["accuracy_ci_low"],
                                                                r["accuracy_ci_high"]),
            "(b) decision": r["accuracy_verdict"],
        })
    return pd.DataFrame.from_records(rows)


def field_arms(rows: Sequence[Mapping]) -> tuple[str | None, list[str]]:
    """The arms the study sets against one baseline, the one of its first comparison: (baseline,
    methods in order). A study with at least two of them (the field, the ablations) gets the figure
    of its arms on the plane of learning per step against cost per step (plots.arms_figure)."""
    if not rows:
        return None, []
    baseline = rows[0]["baseline"]
    methods = [r["method"] for r in rows if r["baseline"] == baseline]
    return baseline, list(dict.fromkeys(methods))


def draws_arms(rows: Sequence[Mapping]) -> bool:
    """Whether a study (its comparison rows, or its summary's) gets the arms figure: two or more arms
    against its first baseline. The workflow's list of outputs and `project` both ask this."""
    return len(field_arms(rows)[1]) >= 2


def secondary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Every secondary endpoint, unadjusted: estimate [95% CI], p and its own decision."""
    rows = []
    for rec in table[table["role"] == "secondary"].to_dict("records"):
        rows.append({**{k: rec[k] for k in _keys(table)}, "question": rec["question"], "endpoint": rec["endpoint"],
                     "estimate [95% CI]": _interval_text(rec["estimate"], rec["ci_low"], rec["ci_high"]),
                     "interval": rec["interval_method"], "p": stats.fmt_p(rec["p_value"]),
                     "verdict (unadjusted)": rec["verdict"], "censored": rec.get("censored") or ""})
    return _one_axis_hidden(pd.DataFrame.from_records(rows))


SUMMARY_MD_COLUMNS = ["name", "benchmark", "design", "axis", "baseline", "method", "endpoint", "role",
                      "target_accuracy",
                      "plateau", "t_baseline_s", "t_method_s", "estimate", "ci_low", "ci_high", "interval_method",
                      "p_value", "p_adjusted", "verdict", "verdict_adjusted", "seeds_for_power", "steps_baseline",
                      "steps_method", "step_efficiency", "step_cost_ratio", "s_per_step_baseline",
                      "s_per_step_method"]


# How a question reads on an axis other than training time (its section title in summary.md).
AXIS_WORDS = {"step": "aligned by optimiser steps (every time a step count)",
              "cost": "on the cost clock (steps x each arm's measured seconds per step)"}


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
            rows = part[(part["endpoint"] == e.name)] if "endpoint" in part.columns else part
            used = list(dict.fromkeys(rows["interval_method"].dropna())) if "interval_method" in rows else []
            interval = " / ".join(used) or e.interval  # what the rows used (paired t, or Welch when unpaired)
            parts.append(f"## ({q}) {words}{on}: primary endpoint `{e.name}` ({interval} 95% interval; "
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
    return not isinstance(axis, str) or axis in verdict.CLOCKS


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
# Writing results
# --------------------------------------------------------------------------------------------
# Every table's floats in one format: 10 significant digits. Python's shortest round-trip repr
# writes the last bits of a float, which move with summation order and thread count
# (1.35314951748453 on one run, 1.3531495174845294 on another); ten digits are far below any
# estimate's precision and make a regenerated table the same bytes.
FLOAT_FORMAT = "%.10g"


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """`df` as CSV without the index (floats in FLOAT_FORMAT), atomically (`pods.atomic`)."""
    atomic_write_text(path, df.to_csv(index=False, float_format=FLOAT_FORMAT))
