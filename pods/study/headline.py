"""The bottom line a study target ends with: a few quotable lines read off summary.csv.

What ran or was re-used, how many primary endpoints are decided after the multiplicity
adjustment, each primary estimate with its interval (question (a)'s speedups beside the paper's
"at least 1.7x", docs/paper.md 1), and where the tables are. Columns are read by name and only
these are needed: `question`, `role`, `estimate`; the others (`ci_low`, `ci_high`,
`verdict_adjusted` or `verdict`, `axis` and the comparison's keys) are used when present, and any
new column is ignored, so the lines stay right when the summary's statistics change.
"""
from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pods.study.verdict import CLOCKS  # the axes that are wall clocks: the paper's claim is about them
from pods.vocabulary import parse_method

PAPER_CLAIM = 1.7  # "at least 1.7x faster" to vanilla GRPO's peak (docs/paper.md 1)
# what each question's estimate is, as the bottom line words it (docs/verdict.md declares both)
QUESTION_WORDS = {
    "a": "speedup, baseline's time over the method's",
    "b": "accuracy within the budget, method - baseline",
}
# the primary endpoint a summary names (its `endpoint` column), as the bottom line words it; an
# endpoint not listed here is named by the question's words and its own name
ENDPOINT_WORDS = {
    "gain_profile": "wall-clock speedup over 10-90% of the baseline's gain (gain profile)",
    "isotonic_0.99": "speedup to 99% of the baseline's peak (isotonic fits)",
    "mean_accuracy": "mean accuracy within the budget, method - baseline",
}
# the columns that tell comparisons apart; a line names those that differ between the rows shown
KEY_COLUMNS = ("name", "benchmark", "hardware", "design")
ARM_COLUMNS = ("method", "baseline")
UNDECIDED = ("", "undecided", "nan", "none")


def read_rows(path: str | os.PathLike) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _decision(row: Mapping) -> str:
    """The adjusted decision where the summary has one, else the raw one."""
    for column in ("verdict_adjusted", "verdict"):
        if str(row.get(column) or "").strip():
            return str(row[column]).strip()
    return "undecided"


def _estimate_text(row: Mapping, question: str) -> str:
    value, low, high = (_number(row.get(c)) for c in ("estimate", "ci_low", "ci_high"))
    signed = question != "a"  # speedups are ratios; the other questions are differences
    fmt = (lambda v: f"{v:+.3f}") if signed else (lambda v: f"{v:.2f}")
    text = "n/a" if math.isnan(value) else fmt(value)
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{fmt(low)}, {fmt(high)}]"
    return text


def _distinct(rows: Sequence[Mapping]) -> list[Mapping]:
    """Primary rows, each comparison once: an ablation repeating the main pair under another name
    is one hypothesis (the adjustment counts it once too)."""
    seen, kept = set(), []
    for row in rows:
        key = tuple(row.get(c) for c in ("benchmark", "hardware", "baseline", "method", "axis", "question"))
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def bottom_line(rows: Sequence[Mapping], *, tables: Sequence[str] = (), runs_total: int | None = None,
                runs_reused: int | None = None, analysis: str | None = None) -> list[str]:
    """The lines a study target ends with. `rows`: summary.csv's rows (dicts of strings); `tables`:
    where the tables are; `runs_total` / `runs_reused`: the study's runs and those finished before
    this command (trained now: the rest); `analysis`: whether the tables were rewritten or re-used."""
    primary = _distinct([r for r in rows if r.get("role") == "primary"])
    questions = sorted({r["question"] for r in primary})
    varying = [c for c in KEY_COLUMNS if len({r.get(c) for r in primary}) > 1] or ["benchmark"]
    arms_vary = any(len({r.get(c) for r in primary}) > 1 for c in ARM_COLUMNS)
    axes = {r.get("axis") or "time" for r in primary}

    lines = ["Bottom line"]
    if runs_total is not None:
        reused = runs_reused or 0
        lines.append(f"  runs: {runs_total} in the study, {reused} re-used as finished before this command, "
                     f"{runs_total - reused} trained now" + (f"; tables {analysis}" if analysis else ""))
    decided = [r for r in primary if _decision(r).lower() not in UNDECIDED]
    per_question = ", ".join(f"({q}) {sum(r['question'] == q for r in decided)} of "
                             f"{sum(r['question'] == q for r in primary)}"
                             for q in questions)
    lines.append(f"  decided: {len(decided)} of {len(primary)} primary endpoints after the adjustment ({per_question})")
    for q in questions:
        shown = [r for r in primary if r["question"] == q]
        endpoints = sorted({str(r.get("endpoint") or "") for r in shown} - {""})
        words = "; ".join(ENDPOINT_WORDS.get(e, f"{QUESTION_WORDS.get(q, f'question {q}')} ({e})") for e in endpoints) \
            or QUESTION_WORDS.get(q, f"question {q}")
        if q == "a":  # the paper's claim: PODS (its rule, max_variance) against vanilla GRPO in wall clock
            claimed = [r for r in shown if (r.get("axis") or "time") in CLOCKS
                       and str(r.get("baseline", "grpo")).startswith("grpo")
                       and str(r.get("method", "pods")).startswith("pods")
                       and (not r.get("method") or parse_method(str(r["method"])).rule == "max_variance")]
        lines.append(f"  ({q}) {words}:")
        for r in shown:
            label = " ".join(str(r.get(c) or "") for c in varying)
            if arms_vary:
                label += f" {r.get('method')} vs {r.get('baseline')}"
            if len(axes) > 1:
                label += f" (by {r.get('axis') or 'time'})"
            lines.append(f"      {label}: {_estimate_text(r, q)} {_decision(r)}")
        if q == "a":
            # several PODS settings (the ablations' n and m) are named by their method too
            named = [*varying, "method"] if len({r.get("method") for r in claimed}) > 1 else varying
            lines.append(f"      {claim_words(claimed, named)}")
    if tables:
        lines.append(f"  tables: {', '.join(map(str, tables))}")
    return lines


def claim_words(rows: Sequence[Mapping], varying: Sequence[str] = ("benchmark", "design")) -> str:
    """The paper's ">= 1.7x" judged by each speedup's interval, never its point estimate: reached
    where the interval lies at or above 1.7, missed where it lies below, open where it holds 1.7
    (or there is none); each comparison named."""
    def name(r):
        return " ".join(str(r.get(c) or "") for c in varying).strip() or "the comparison"

    groups: dict[str, list[str]] = {"reach it": [], "fall short of it": [], "cannot tell": []}
    for r in rows:
        low, high = _number(r.get("ci_low")), _number(r.get("ci_high"))
        key = ("cannot tell" if math.isnan(low) or math.isnan(high) else "reach it" if low >= PAPER_CLAIM
               else "fall short of it" if high < PAPER_CLAIM else "cannot tell")
        groups[key].append(name(r))
    said = "; ".join(f"{key}: {', '.join(names)}" for key, names in groups.items() if names)
    return (f"the paper's >= {PAPER_CLAIM}x for PODS over GRPO, judged by each interval (reach it: all of it >= "
            f"{PAPER_CLAIM}; fall short: all of it below): " + (said or "no such comparison"))


def confirmation_of(folder: str | os.PathLike | None, comparisons: Sequence[Mapping]) -> Path | None:
    """The last look table (`look<k>.csv`) in `folder` when that confirmation tested this study's
    comparisons (the same benchmark, hardware, design, baseline and method pairs), else None: a
    study layered over the default (smoke, ablations, ...) inherits the folder, not the confirmation."""
    looks = sorted(Path(folder).glob("look*.csv"), key=lambda p: int(p.stem[len("look"):])) if folder else []
    if not looks:
        return None
    keys = ("benchmark", "hardware", "design", "baseline", "method")
    tested = {tuple(r[k] for k in keys) for r in read_rows(looks[-1])}
    return looks[-1] if tested == {tuple(str(c[k]) for k in keys) for c in comparisons} else None


QUESTIONS_PLAIN = {
    "a": "(a) Does PODS reach the baseline's accuracy sooner in wall clock? (speedup over 10-90% of the gain)",
    "b": "(b) Does PODS learn more within the same time budget? (mean accuracy over the budget, PODS - baseline)",
}


def confirmation_lines(look_table: str | os.PathLike, *, config: str = "config/confirm.yaml") -> list[str]:
    """The confirmation's answer, read off its last look's table (`pods confirm`'s csv), in plain
    words: how many fresh seed pairs, whether it finished, and per question each comparison's
    decision in its sequence with its estimate and repeated 95% interval where the table has them;
    a comparison past its boundary that is undecided says the sequence stopped before it."""
    rows = read_rows(look_table)
    last = max(int(r["look"]) for r in rows)
    rows = [r for r in rows if int(r["look"]) == last]
    finished = str(rows[0].get("finished", "")).strip().lower() == "true"
    decided = [r for r in rows if _decision(r).lower() not in UNDECIDED]
    lines = [f"Confirmation on fresh seeds ({config}): look {last}, {rows[0]['pairs']} seed pairs per arm, "
             + ("finished" if finished else "continues with the next batch (snakemake --cores all confirm "
                                            f"--configfile {config})"),
             f"  decided: {len(decided)} of {len(rows)} comparisons at the group-sequential boundary (2.5% per side "
             "of a wrong decision, over all looks)"]
    for q in sorted({r["question"] for r in rows}):
        shown = sorted((r for r in rows if r["question"] == q), key=lambda r: int(r["position"]))
        lines.append(f"  {QUESTIONS_PLAIN.get(q, f'({q})')}")
        blocked = None
        for r in shown:
            z = _number(r["z"])
            boundary = _number(r["boundary"])
            ztext = f"{z:.2f}" if math.isfinite(z) else "n/a (no p-value)"
            estimate = ""
            if "estimate" in r and math.isfinite(_number(r.get("estimate"))):
                estimate = _estimate_text({"estimate": r["estimate"], "ci_low": r.get("rci_low"),
                                           "ci_high": r.get("rci_high")}, q) + ", "
            why = ""
            if _decision(r).lower() in UNDECIDED and blocked is not None and math.isfinite(z) and abs(z) >= boundary:
                why = f" (past its boundary, but the fixed sequence tests it only after {blocked} decides)"
            if _decision(r).lower() in UNDECIDED and blocked is None:
                blocked = f"{r['benchmark']} {r['design']}"
            lines.append(f"      {r['benchmark']} {r['design']} {r['method']} vs {r['baseline']}: {estimate}"
                         f"z {ztext} (boundary {boundary:.2f}) {_decision(r)}{why}")
        if q == "a" and any("rci_low" in r for r in shown):  # the paper's 1.7x, by the repeated intervals
            lines.append("      " + claim_words([{**r, "ci_low": r.get("rci_low"), "ci_high": r.get("rci_high")}
                                                 for r in shown]).replace("each interval", "each repeated interval"))
    lines.append(f"  table: {Path(look_table).with_suffix('.md')}")
    return lines
