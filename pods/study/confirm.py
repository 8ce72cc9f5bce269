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


def plan_order(design: pd.DataFrame, seeds: int, analysed: set[tuple] | None = None) -> dict[str, list[tuple]]:
    """Each question's primaries in the order they are tested: highest a-priori power first, at the
    confirmation's capped seed count, the endpoint's declared minimum effect and the exploratory
    study's per-seed SD (`unit_sd` of its summary). Ties keep the exploratory study's row order.
    `analysed` (the comparisons' keys a look analyses) keeps only the exploratory rows the
    confirmation tests again: a screen's summary may hold comparisons it leaves out, and a primary
    no look analyses would stay undecided and block the fixed sequence behind it."""
    order: dict[str, list[tuple]] = {}
    if analysed is not None:
        design = design[[_key(row) in analysed for row in design.to_dict("records")]]
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


def walk(looks: Sequence[Mapping[str, np.ndarray]], order: Mapping[str, Sequence[tuple]],
         bounds: Mapping[int, sequential.Boundaries], max_looks: int,
         procedure: str = "fixed_sequence") -> dict[str, sequential.Outcome]:
    """The decisions after the looks run so far (a list of look_z results, first look first): each
    question's primaries walked through their boundaries (`sequential.level_boundaries`, `max_looks`
    looks at most) by the declared procedure (the fixed sequence in `order`, or Holm's)."""
    levels = {j: b.bounds for j, b in bounds.items()}
    out = {}
    for question, keys in order.items():
        z = np.full((max_looks, len(keys)), np.nan)
        for i, look in enumerate(looks[:max_looks]):
            z[i] = look[question]
        out[question] = sequential.PROCEDURES[procedure](z, levels)
    return out


def finished(outcomes: Mapping[str, sequential.Outcome], looks_run: int, max_looks: int) -> bool:
    """Stop adding seeds: every primary decided, or the cap reached."""
    return looks_run >= max_looks or all(bool(np.all(o.direction != 0)) for o in outcomes.values())


def repeated_interval(row: Mapping, e: verdict.Endpoint, boundary: float) -> tuple[float, float]:
    """The repeated confidence interval of a primary at a look (Jennison & Turnbull 2000, ch. 9):
    its declared interval widened from the fixed-sample 95% t quantile to the look's boundary (on
    the t scale of the look's degrees of freedom, as z_from_t maps it), so that the intervals of
    every look hold the truth together with 95% probability whatever the stopping. On the log scale
    for a speedup. NaN where the look has no interval."""
    lo, hi, est, k = (float(row.get(c, math.nan)) for c in ("ci_low", "ci_high", "estimate", "n_seeds_baseline"))
    if not all(map(math.isfinite, (lo, hi, est, k, boundary))) or k < 2 or (e.log_scale and min(lo, hi, est) <= 0):
        return math.nan, math.nan
    df = k - 1
    scale = (lambda v: math.log(v)) if e.log_scale else (lambda v: v)
    back = math.exp if e.log_scale else (lambda v: v)
    se = (scale(hi) - scale(lo)) / (2 * float(sps.t.ppf(0.975, df)))
    wide = float(sps.t.isf(sps.norm.sf(boundary), df)) * se
    return back(scale(est) - wide), back(scale(est) + wide)


def confirmation_table(looks: Sequence[Mapping[str, np.ndarray]], order: Mapping[str, Sequence[tuple]],
                       bounds: Mapping[int, sequential.Boundaries], max_looks: int, procedure: str = "fixed_sequence",
                       summaries: Sequence[pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per (look, question, primary): pairs so far, z, the full-level boundary and its
    Monte-Carlo error, the estimate with its repeated confidence interval (from the look's
    summary), and the decision as it stood after that look ("faster"/"slower", "higher"/"lower",
    or "undecided")."""
    full = bounds[1]
    rows = []
    for n_looks in range(1, len(looks) + 1):
        outcomes = walk(looks[:n_looks], order, bounds, max_looks, procedure)
        summary = summaries[n_looks - 1] if summaries is not None else None
        for question, keys in order.items():
            e = verdict.PRIMARY[question]
            above, below = e.words
            o = outcomes[question]
            records = _primary_rows(summary, e) if summary is not None else {}
            for position, key in enumerate(keys):
                decided = o.direction[position]
                r = records.get(key, {})
                rci = repeated_interval(r, e, float(full.bounds[n_looks - 1]))
                rows.append({"look": n_looks, "pairs": r.get("n_seeds_baseline", math.nan), "question": question,
                             "endpoint": e.name, "position": position + 1, **dict(zip(KEYS, key)),
                             "estimate": r.get("estimate", math.nan), "rci_low": rci[0], "rci_high": rci[1],
                             "z": float(looks[n_looks - 1][question][position]),
                             "boundary": float(full.bounds[n_looks - 1]), "boundary_se": float(full.se[n_looks - 1]),
                             "decided_at_look": int(o.look[position]) or None,
                             "verdict": above if decided > 0 else below if decided < 0 else "undecided"})
    # a look number, empty while undecided (not 3.0 and nan once a column mixes both)
    return pd.DataFrame(rows).astype({"decided_at_look": "Int64"})


def _primary_rows(summary: pd.DataFrame, e: verdict.Endpoint) -> dict[tuple, dict]:
    axis = summary.get("axis", pd.Series("time", index=summary.index))
    primary = summary[(summary["endpoint"] == e.name) & axis.isin(verdict.CLOCKS)]
    return {_key(r): r for r in primary.to_dict("records")}


def _number(value: float, digits: int) -> str:
    return "n/a" if pd.isna(value) else f"{value:.{digits}f}"


def confirmation_markdown(table: pd.DataFrame, finished_now: bool, procedure: str = "fixed_sequence") -> str:
    """The decisions after the last look, one row per primary in its sequence, and where it stands."""
    last = table[table["look"] == table["look"].max()]
    walked = ("each question's comparisons in their declared fixed sequence: one is tested only once every one "
              "before it has decided" if procedure == "fixed_sequence" else
              "each question's comparisons by Holm's procedure inside the boundaries")
    first = last.iloc[0]
    lines = [f"## Confirmation after look {int(first['look'])} ({_number(first['pairs'], 0)} seed pairs): "
             + ("finished" if finished_now else "continues with the next batch of seeds"), "",
             f"Boundary {first['boundary']:.3f} (Monte-Carlo SE {first['boundary_se']:.4f}), 2.5% per side over "
             f"the looks; {walked}. Intervals are repeated 95% confidence intervals (valid whenever the "
             "sequence stops).", "",
             "| question | position | benchmark | design | baseline | method | estimate [repeated 95% CI] | z | "
             "boundary | verdict | decided at look |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in last.to_dict("records"):
        digits = 2 if verdict.ENDPOINTS[r["endpoint"]].log_scale else 4
        estimate = (f"{_number(r['estimate'], digits)} [{_number(r['rci_low'], digits)}, "
                    f"{_number(r['rci_high'], digits)}]")
        lines.append(f"| {r['question']} | {r['position']} | {r['benchmark']} | {r['design']} | {r['baseline']} | "
                     f"{r['method']} | {estimate} | {_number(r['z'], 2)} | {r['boundary']:.2f} | {r['verdict']} | "
                     f"{'' if pd.isna(r['decided_at_look']) else int(r['decided_at_look'])} |")
    return "\n".join(lines) + "\n"


def _cmd_confirm(args) -> int:
    from pathlib import Path

    from pods.atomic import atomic_write_text
    from pods.study.tables import read_summary_table, write_csv

    design = read_summary_table(args.design)
    if not args.looks or len(args.looks) > args.max_looks:
        raise ValueError(f"--looks: 1 to {args.max_looks} look summaries, got {len(args.looks)}")
    summaries = [read_summary_table(path) for path in args.looks]
    order = plan_order(design, args.batch * args.max_looks, {_key(row) for row in summaries[0].to_dict("records")})
    looks = [look_z(summary, order) for summary in summaries]
    hypotheses = max(len(keys) for keys in order.values())
    levels = hypotheses if args.procedure == "holm" else 1
    bounds = sequential.level_boundaries(args.batch, args.max_looks, levels, sequential.SIDE_ALPHA, args.spending,
                                         sims=args.sims)
    table = confirmation_table(looks, order, bounds, args.max_looks, args.procedure, summaries)
    done = finished(walk(looks, order, bounds, args.max_looks, args.procedure), len(looks), args.max_looks)
    table["finished"] = done
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(table, out)
    md = confirmation_markdown(table, done, args.procedure)
    atomic_write_text(out.with_suffix(".md"), md)
    print(md, end="")
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--design", required=True,
                        help="the exploratory study's summary.csv: orders the comparisons the looks analyse")
    parser.add_argument("--looks", nargs="+", required=True, help="each look's summary.csv, first look first")
    parser.add_argument("--batch", type=int, required=True, help="new seed pairs per look")
    parser.add_argument("--max-looks", type=int, required=True, help="looks at most (the cap)")
    parser.add_argument("--spending", default="obrien_fleming", choices=list(sequential.SPENDING.names()))
    parser.add_argument("--procedure", default="fixed_sequence", choices=list(sequential.PROCEDURES.names()),
                        help="how each question's comparisons share alpha (docs/verdict.md)")
    parser.add_argument("--sims", type=int, default=4_000_000,
                        help="simulated null paths behind the boundaries of looks 2 on (look 1's is exact)")
    parser.add_argument("--out", required=True, help="confirmation.csv (the .md goes beside it)")
    parser.set_defaults(func=_cmd_confirm)
