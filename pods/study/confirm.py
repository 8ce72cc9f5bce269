"""A confirmation: the primaries of an exploratory study tested again on fresh seeds, added in
batches until they decide or a cap is reached (docs/verdict.md, "Seeds until it decides").

    plan_order(design)          the fixed sequence of each question's primaries, from the
                                exploratory study's summary (a-priori power at the minimum effect)
    look_z(summary, order)      each primary's statistic at one look, on the normal scale
    walk(looks, order, batch)   the decisions so far: pods.study.sequential's boundaries and walk
    confirmation_table(...)     one row per (look, primary) -> confirmation.csv / .md

A look is an ordinary `pods analyze` summary of the confirmation's runs so far (its seeds paired
by seed as every study's are), so the estimates and intervals are the declared ones; this module
only adds the sequential decision on top of them.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from pods.study import calibration, sequential, verdict

KEYS = ("benchmark", "hardware", "design", "baseline", "method")


def _key(row: Mapping) -> tuple:
    return tuple(row[k] for k in KEYS)


def plan_order(design: pd.DataFrame, seeds: int) -> dict[str, list[tuple]]:
    """Each question's primaries in the order they are tested: highest a-priori power first, at the
    confirmation's capped seed count, the endpoint's declared minimum effect and the exploratory
    study's per-seed SD (`unit_sd` of its summary). Ties keep the exploratory study's row order."""
    order: dict[str, list[tuple]] = {}
    primaries = design[(design["role"] == "primary") & design.get("axis", pd.Series("time",
                                                                                    index=design.index)).isin(verdict.CLOCKS)]
    for question, rows in primaries.groupby("question", sort=True):
        e = verdict.PRIMARY[question]
        scored = []
        for i, row in enumerate(rows.to_dict("records")):
            sd = float(row.get("unit_sd", math.nan))
            power = calibration.t_test_power(sd, e.minimum_effect, seeds, row.get("pairing") == "seed")
            scored.append((-np.nan_to_num(power, nan=-1.0), i, _key(row)))
        order[question] = [key for _, _, key in sorted(scored)]
    return order


def look_z(summary: pd.DataFrame, order: Mapping[str, Sequence[tuple]]) -> dict[str, np.ndarray]:
    """Each question's primaries at one look, in their order, on the normal scale: the sign of the
    estimate (against no effect) times the normal quantile of the one-sided p-value of its declared
    test (the paired t, or the t_boot statistic on k - 1 degrees of freedom), as
    sequential.z_from_t does. NaN for a primary the summary lacks or whose p-value is missing: it
    stays undecided at that look."""
    out = {}
    for question, keys in order.items():
        e = verdict.PRIMARY[question]
        axis = summary.get("axis", pd.Series("time", index=summary.index))
        primary = summary[(summary["endpoint"] == e.name) & axis.isin(verdict.CLOCKS)]
        rows = {_key(r): r for r in primary.to_dict("records")}
        z = []
        for key in keys:
            r = rows.get(key, {})
            p, estimate = r.get("p_value", math.nan), r.get("estimate", math.nan)
            if not (math.isfinite(p) and math.isfinite(estimate)):
                z.append(math.nan)
                continue
            effect = math.log(estimate) if e.log_scale else estimate
            z.append(math.copysign(float(sps.norm.isf(max(p, 1e-300) / 2)), effect) if p < 1 else 0.0)
        out[question] = np.array(z)
    return out


def walk(looks: Sequence[Mapping[str, np.ndarray]], order: Mapping[str, Sequence[tuple]], batch: int,
         max_looks: int, spending: str = "obrien_fleming") -> dict[str, sequential.Outcome]:
    """The decisions after the looks run so far (a list of look_z results, first look first):
    each question's fixed sequence walked through its boundaries (t boundaries for `batch` new
    pairs per look, `max_looks` looks at most)."""
    bounds = sequential.t_boundaries(batch, max_looks, sequential.SIDE_ALPHA, spending)
    out = {}
    for question, keys in order.items():
        z = np.full((max_looks, len(keys)), np.nan)
        for i, look in enumerate(looks[:max_looks]):
            z[i] = look[question]
        out[question] = sequential.hierarchical(z, bounds)
    return out


def finished(outcomes: Mapping[str, sequential.Outcome], looks_run: int, max_looks: int) -> bool:
    """Stop adding seeds: every primary decided, or the cap reached."""
    return looks_run >= max_looks or all(bool(np.all(o.direction != 0)) for o in outcomes.values())


def confirmation_table(looks: Sequence[Mapping[str, np.ndarray]], order: Mapping[str, Sequence[tuple]], batch: int,
                       max_looks: int, spending: str = "obrien_fleming") -> pd.DataFrame:
    """One row per (look, question, primary): pairs so far, z, the boundary, and the decision as it
    stood after that look ("faster"/"slower", "higher"/"lower", or "undecided")."""
    bounds = sequential.t_boundaries(batch, max_looks, sequential.SIDE_ALPHA, spending)
    rows = []
    for n_looks in range(1, len(looks) + 1):
        outcomes = walk(looks[:n_looks], order, batch, max_looks, spending)
        for question, keys in order.items():
            above, below = verdict.PRIMARY[question].words
            o = outcomes[question]
            for position, key in enumerate(keys):
                decided = o.direction[position]
                rows.append({"look": n_looks, "pairs": batch * n_looks, "question": question,
                             "endpoint": verdict.PRIMARY[question].name, "position": position + 1,
                             **dict(zip(KEYS, key)), "z": float(looks[n_looks - 1][question][position]),
                             "boundary": float(bounds[n_looks - 1]),
                             "decided_at_look": int(o.look[position]) or None,
                             "verdict": above if decided > 0 else below if decided < 0 else "undecided"})
    # a look number, empty while undecided (not 3.0 and nan once a column mixes both)
    return pd.DataFrame(rows).astype({"decided_at_look": "Int64"})


def confirmation_markdown(table: pd.DataFrame, finished_now: bool) -> str:
    """The decisions after the last look, one row per primary in its sequence, and where it stands."""
    last = table[table["look"] == table["look"].max()]
    lines = [f"## Confirmation after look {int(last['look'].iloc[0])} ({int(last['pairs'].iloc[0])} seed pairs): "
             + ("finished" if finished_now else "continues with the next batch of seeds"), "",
             "| question | position | benchmark | design | baseline | method | z | boundary | verdict | decided at "
             "look |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in last.to_dict("records"):
        z = "n/a" if pd.isna(r["z"]) else f"{r['z']:.2f}"  # no p-value (look_z)
        lines.append(f"| {r['question']} | {r['position']} | {r['benchmark']} | {r['design']} | {r['baseline']} | "
                     f"{r['method']} | {z} | {r['boundary']:.2f} | {r['verdict']} | "
                     f"{'' if pd.isna(r['decided_at_look']) else int(r['decided_at_look'])} |")
    return "\n".join(lines) + "\n"


def _cmd_confirm(args) -> int:
    from pathlib import Path

    from pods.atomic import atomic_write_text
    from pods.study.tables import read_summary_table

    design = read_summary_table(args.design)
    order = plan_order(design, args.batch * args.max_looks)
    looks = [look_z(read_summary_table(path), order) for path in args.looks]
    if not looks or len(looks) > args.max_looks:
        raise ValueError(f"--looks: 1 to {args.max_looks} look summaries, got {len(looks)}")
    table = confirmation_table(looks, order, args.batch, args.max_looks, args.spending)
    done = finished(walk(looks, order, args.batch, args.max_looks, args.spending), len(looks), args.max_looks)
    table["finished"] = done
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, table.to_csv(index=False))
    md = confirmation_markdown(table, done)
    atomic_write_text(out.with_suffix(".md"), md)
    print(md, end="")
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--design", required=True, help="the exploratory study's summary.csv (orders the sequence)")
    parser.add_argument("--looks", nargs="+", required=True, help="each look's summary.csv, first look first")
    parser.add_argument("--batch", type=int, required=True, help="new seed pairs per look")
    parser.add_argument("--max-looks", type=int, required=True, help="looks at most (the cap)")
    parser.add_argument("--spending", default="obrien_fleming", choices=list(sequential.SPENDING.names()))
    parser.add_argument("--out", required=True, help="confirmation.csv (the .md goes beside it)")
    parser.set_defaults(func=_cmd_confirm)
