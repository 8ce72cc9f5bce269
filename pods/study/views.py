"""The workflow's views over a whole study that need tables and figures together: the verdict
views (speedup profile, calibration, time to target) and the decomposition / projection tables.

They sit above `pods.study.analysis` (tables), `pods.study.calibration` and `pods.study.plots` (figures), which
import neither this module nor each other's callers, so the study side's imports run one way.
"""
from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from pods.atomic import atomic_write_text
from pods.study import calibration, plots, stats, verdict
from pods.study.analysis import comparison_arms, comparison_label, comparison_paired, load_study, study_run_dirs
from pods.study.curves import load_runs
from pods.study.tables import (
    cost_sources,
    decomposition_table,
    draws_arms,
    field_points,
    projection_table,
    read_summary_table,
    to_markdown,
    write_csv,
)

PLANNING_SEEDS = (4, 10, 30)  # seed counts a reader plans with, calibrated beside the study's own


def seed_counts(comparisons: list[dict]) -> tuple[int, tuple[int, ...]]:
    """The study's own seed count (its fewest seeds per arm: what its verdicts stand on, and where
    the declared primaries are reported) and every count to calibrate: that one and PLANNING_SEEDS."""
    shipped = min((len(c["base"]) for c in comparisons), default=PLANNING_SEEDS[0])
    return shipped, tuple(sorted({shipped, *PLANNING_SEEDS}))


PROFILE_COLUMNS = ["comparison", "benchmark", "hardware", "design", "baseline", "method", "level",
                   "t_baseline_s", "t_method_s", "speedup", "ci_low", "ci_high"]


def verdict_views(runs, study_path, out_dir, figures_dir, studies: int = 200, boot: int = 200,
                  primary_studies: int | None = None,
                  seed: int = 0) -> list[Path]:
    """speedup_profile.csv and calibration.csv/.md in `out_dir`; speedup_profile.{png,pdf} and
    time_to_target.{png,pdf} (Kaplan-Meier) in `figures_dir`, for every comparison of the study
    on the training clock."""
    study = load_study(study_path)
    tables = load_runs(study_run_dirs(study, runs))
    profile_rows, km, comps = [], [], []
    seen = set()
    for comp in study:
        label = comparison_label(comp)
        if label in seen:  # the same two arms under another name (an ablation reusing `main`'s pair)
            continue
        if comp.get("axis", verdict.DEFAULT_AXIS) not in verdict.CLOCKS:
            continue  # these views (and their calibration) are of the wall-clock claim
        seen.add(label)
        grid, base, meth, _, _ = comparison_arms(comp, tables.evals)
        keys = {k: comp[k] for k in ("benchmark", "hardware", "design", "baseline", "method")}
        profile_rows += [{"comparison": label, **keys, **r} for r in verdict.speedup_profile(grid, base, meth,
                                                                                             seed=seed)]
        target = comp.get("target_accuracy")
        if target is None:
            target = stats.isotonic_rule(grid, base.curves.mean(axis=0)[None, :], meth.curves.mean(axis=0)[None, :],
                                         0.99).target[0]
        axis = comp.get("axis", verdict.DEFAULT_AXIS)
        km.append((label, float(target), verdict.survival_curves(grid, base, meth, float(target)), axis)
                  if np.isfinite(target) else (label, math.nan, None, axis))
        comps.append({"label": label, "t": grid, "base": base.curves, "meth": meth.curves,
                      "fixed": comp.get("target_accuracy"), "paired": comparison_paired(comp)})
    out_dir, figures_dir = Path(out_dir), Path(figures_dir)
    profile = pd.DataFrame.from_records(profile_rows, columns=PROFILE_COLUMNS)
    write_csv(profile, out_dir / "speedup_profile.csv")
    shipped, seeds = seed_counts(comps)
    digest = calibration.inputs_digest(comps, seeds=seeds, studies=studies, boot=boot, seed=seed,
                                       primary_studies=primary_studies)
    recorded = out_dir / "calibration.md"
    stamp = f"<!-- inputs sha256 {digest} -->"
    if not (recorded.is_file() and (out_dir / "calibration.csv").is_file() and stamp in recorded.read_text()):
        # minutes of simulation: only when a curve, a setting or the harness's code changed
        table = calibration.calibrate(comps, seeds=seeds, studies=studies, boot=boot, seed=seed,
                                      primary_studies=primary_studies, shipped=shipped)
        table.attrs["studies"] = studies
        write_csv(table, out_dir / "calibration.csv")
        heading = (f"## Calibration of every endpoint ({studies} simulated studies per cell, "
                   + (f"{primary_studies} for the primaries at {shipped} seeds, " if primary_studies else "")
                   + f"{boot} resamples; docs/verdict.md)")
        atomic_write_text(recorded, f"{heading}\n\n{stamp}\n\n" + calibration.report(table, comps, shipped) + "\n"
                          + calibration.calibration_markdown(table))
    written = [out_dir / "speedup_profile.csv", out_dir / "calibration.csv", out_dir / "calibration.md"]
    written += plots.speedup_profile_figure(profile, figures_dir / "speedup_profile",
                                            labels=[c["label"] for c in comps])
    written += plots.time_to_target_figure(km, figures_dir / "time_to_target")
    return written



def project(summary: str | os.PathLike, paper: str | os.PathLike | None, costs: Sequence[str | os.PathLike],
            out_dir: str | os.PathLike, figures_dir: str | os.PathLike | None) -> list[Path]:
    """decomposition.csv/.md and projection.csv/.md (+ their figures) from summary tables, and the
    figure of the study's arms on the plane of learning per step against cost per step (arms.png)
    when it sets two or more arms against one baseline."""
    ours = read_summary_table(summary)
    theirs = read_summary_table(paper) if paper is not None else None
    out_dir = Path(out_dir)
    decomposition = decomposition_table(ours, theirs)
    projection = projection_table(ours, cost_sources(theirs, costs))
    if theirs is not None and costs:  # the paper's step efficiency onto the measured machines too
        carried = projection_table(theirs, cost_sources(None, costs))
        carried["setting"] = "paper " + carried["setting"]
        projection = pd.concat([projection, carried], ignore_index=True)
    written = []
    for name, table, heading in (
            ("decomposition", decomposition, "speedup = step efficiency / step-cost ratio, ours and the paper's"),
            ("projection", projection, "PROJECTIONS, not measurements: a step efficiency (ours, or the paper's "
                                       "onto a measured machine) / another machine's step-cost ratio")):
        write_csv(table, out_dir / f"{name}.csv")
        atomic_write_text(out_dir / f"{name}.md", f"## {heading} (docs/verdict.md)\n\n" + to_markdown(table))
        written += [out_dir / f"{name}.csv", out_dir / f"{name}.md"]
    if figures_dir is not None:
        written += plots.decomposition_figure(decomposition, Path(figures_dir) / "decomposition")
        written += plots.projection_figure(decomposition, projection, Path(figures_dir) / "projection")
        points = field_points(ours)
        if draws_arms(points.to_dict("records")):
            written += plots.arms_figure(points, Path(figures_dir) / "arms")
    return written


def _cmd_project(args: argparse.Namespace) -> int:
    written = project(args.summary, args.paper, args.costs, args.out, args.figures)
    print(Path(args.out, "projection.md").read_text(), end="")
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def add_project_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--summary", required=True, help="our summary.csv (pods analyze)")
    p.add_argument("--paper", default=None, help="the summary.csv of the authors' settings (pods paper figures)")
    p.add_argument("--costs", nargs="*", default=[], help="phase-cost files of benchmarks/step_time.py --out")
    p.add_argument("--out", required=True, help="folder for decomposition.csv/.md and projection.csv/.md")
    p.add_argument("--figures", default=None, help="folder for decomposition.png/.pdf and projection.png/.pdf")
    p.set_defaults(func=_cmd_project)


# --- pods calibrate: the calibration of every endpoint, for a study's own runs -----------------
def comparisons_from_runs(runs, study_path, align: str | None = None) -> list[dict]:
    """The study's comparisons as calibrate() takes them: each arm's curves on the comparison's grid."""
    study = load_study(study_path)
    tables = load_runs(study_run_dirs(study, runs))  # only the runs the study names (pods analyze reads the same)
    out = {}
    for comp in study:
        label = comparison_label(comp)
        if label in out:  # the same two arms listed twice (under two comparison names)
            continue
        t, base, meth = comparison_arms(comp, tables.evals, how=align)[:3]
        out[label] = {"label": label, "t": t, "base": base.curves, "meth": meth.curves,
                      "fixed": comp.get("target_accuracy"), "paired": comparison_paired(comp)}
    return list(out.values())


def _cmd_calibrate(args: argparse.Namespace) -> int:
    comps = comparisons_from_runs(args.runs, args.study)
    if args.check_only:  # the population model against held-out seeds, without the simulations
        line = calibration.predictive_line(comps)
        if args.out is not None:
            out = Path(args.out).with_suffix(".md")
            out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out, f"## Predictive check ({args.study}; pods.study.calibration)\n\n{line}\n")
        print(line)
        return 0
    shipped, seeds = seed_counts(comps)
    if args.seeds:  # the first one given is the one the declared primaries are reported at
        seeds = [int(s) for s in str(args.seeds).split(",")]
        shipped = seeds[0]
    table = calibration.calibrate(comps, seeds=seeds, studies=args.studies, boot=args.boot, seed=args.seed,
                                  tails=args.tails, primary_studies=args.primary_studies, shipped=shipped)
    out = Path(args.out or "results/calibration.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(table, out)
    table.attrs["studies"] = args.studies
    md = calibration.calibration_markdown(table)
    declared = calibration.report(table, comps, shipped)
    atomic_write_text(out.with_suffix(".md"),
                      f"## Calibration ({args.studies} simulated studies per cell, {args.boot} resamples, "
                      f"{args.tails} tails, seed {args.seed}; pods.study.calibration)\n\n" + md + "\n" + declared)
    print(md + "\n" + declared, end="")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _seed_list(text: str) -> str:
    try:
        values = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 2 for v in values):
        raise argparse.ArgumentTypeError(f"every seed count must be >= 2, got {text}")
    return text


def add_calibrate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", required=True, help="results folder holding runs/ (or runs/ itself)")
    p.add_argument("--study", required=True, help="the study's comparisons (results/study.yaml)")
    p.add_argument("--seeds", type=_seed_list, default=None,
                   help="seed counts per arm to simulate, the first one reported for the declared primaries "
                        "(default: the study's own count, then 4, 10 and 30)")
    p.add_argument("--studies", type=_positive, default=200, help="simulated studies per cell")
    p.add_argument("--boot", type=_positive, default=200, help="bootstrap resamples per simulated study")
    p.add_argument("--primary-studies", type=_positive, default=2400,
                   help="simulated studies per cell for the declared primaries at the study's seed count "
                        "(2400: a coverage's Monte-Carlo error 0.0044, a 2.5%% error rate's 0.0032)")
    p.add_argument("--tails", choices=("normal", "t3"), default="normal", help="the noise's distribution")
    p.add_argument("--seed", type=int, default=0, help="RNG seed (the table is deterministic given it)")
    p.add_argument("--out", default=None, help="CSV path; the .md goes beside it (default results/calibration.csv; "
                                              "with --check-only only the .md, and only when given)")
    p.add_argument("--check-only", action="store_true",
                   help="only the leave-one-seed-out predictive check of the population model (seconds, no "
                        "simulated studies): whether the model the calibration rests on predicts held-out seeds")
    p.set_defaults(func=_cmd_calibrate)


def flat_groups_table(runs) -> pd.DataFrame:
    """What a pre-rollout filter (GRESO's) could save in each arm, read off its runs' steps.jsonl.
    `flat_share`: the share of generated prompt groups whose n rewards were all equal, each step
    weighted by the groups it generated (rollouts_generated / n): the most a filter that knew every
    flat group in advance could skip. `prompts_drawn`: the prompts a run took from its stream (the
    groups it generated plus those GRESO skipped), the most and the mean over the arm's seeds: a
    prompt comes back within a run only once it has drawn more than its task's training set."""
    from pods.study.curves import load_steps
    from pods.vocabulary import parse_method

    steps = load_steps(runs)
    rows = []
    for (benchmark, hardware, method), part in steps.groupby(["benchmark", "hardware", "method"], sort=True):
        groups = pd.to_numeric(part["rollouts_generated"]) / parse_method(method).n
        skipped = pd.to_numeric(part["prompts_skipped"]).fillna(0) if "prompts_skipped" in part else 0
        flat = (pd.to_numeric(part["zero_variance_frac"]) * groups).sum() / groups.sum()
        drawn = (groups + skipped).groupby(part["seed"]).sum()
        rows.append({"benchmark": benchmark, "hardware": hardware, "method": method, "seeds": len(drawn),
                     "flat_share": float(flat), "prompts_drawn_max": int(round(drawn.max())),
                     "prompts_drawn_mean": float(drawn.mean())})
    return pd.DataFrame.from_records(rows)


def _cmd_groups(args: argparse.Namespace) -> int:
    table = flat_groups_table(args.runs)
    md = to_markdown(table.assign(flat_share=table["flat_share"].map("{:.3f}".format),
                                  prompts_drawn_mean=table["prompts_drawn_mean"].map("{:.0f}".format)))
    if args.out is not None:
        write_csv(table, args.out)
        atomic_write_text(Path(args.out).with_suffix(".md"), md)
    print(md, end="")
    return 0


def add_groups_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", required=True, help="a runs folder (every run under it is read)")
    p.add_argument("--out", default=None, help="CSV path; the .md goes beside it (default: print only)")
    p.set_defaults(func=_cmd_groups)
