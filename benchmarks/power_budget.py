"""Which split of the default study's ~60 minutes buys the most power (docs/embedded-default.md).

The default study trains 6 runs per seed (2 benchmarks x 3 arms), two at a time on 2 cores, so
seeds x budget per run is about fixed (4 x 240 s, 6 x 165 s, 8 x 120 s). For each split (k seed
pairs x T seconds) and each comparison of the study, this prints the **a-priori power** of each
declared primary endpoint (docs/verdict.md) at its declared **minimum effect** (1.2x, +0.01): the
exact power of its paired t test with k pairs, planning with the per-seed SD that the committed
runs give when cut at T (a design-stage estimate: `pods.study.calibration.apriori_power_at`, the
number `pods calibrate` reports, at its level). Power comes from the declared effect, not from the
effect the committed runs happen to show. Splits whose T lies beyond the committed runs' budget
cannot be evaluated from them and are skipped with a line.

`--observed` prints, beside it, the older projection: the harness's population model fitted to
the runs cut at T, simulated studies of k seed pairs at the effects the committed runs estimate,
and the share that decide at the study's Bonferroni level (5% / comparisons). That is a
projection at observed effects (it restates the data's p-values), labelled as one; the 6 x 165 s
split of the default study was chosen with it (docs/embedded-default.md).

    python benchmarks/power_budget.py [--runs results] [--study results/study.yaml]
                                      [--observed --studies 300 --boot 200]
"""
import argparse

import numpy as np
import pandas as pd

from pods.study import analysis, calibration, verdict
from pods.study.curves import load_runs

SPLITS = ((4, 240.0), (5, 195.0), (6, 165.0), (8, 120.0), (10, 95.0))


def observed_power(e, t, m_b, m_m, sims, rng, boot, alpha) -> tuple[float, float]:
    """(true effect under the fitted model, share of simulated studies that decide it the right way)."""
    sim_b, sim_m = sims
    true = calibration.truth(e, t, m_b, m_m)
    est, iv = next(iter(calibration.evaluate(e, t, sim_b, sim_m, [e.interval], rng, boot, paired=True).values()))
    right = est > 0 if true > 0 else est < 0
    return (float(np.exp(true)) if e.log_scale else true), float(np.mean((iv.p_value < alpha) & right))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="results")
    p.add_argument("--study", default="results/study.yaml")
    p.add_argument("--observed", action="store_true", help="add the projection at the observed effects")
    p.add_argument("--studies", type=int, default=300, help="simulated studies per cell (--observed)")
    p.add_argument("--boot", type=int, default=200, help="bootstrap resamples per simulated study (--observed)")
    args = p.parse_args()
    study = analysis.load_study(args.study)
    evals = load_runs(args.runs).evals
    rng = np.random.default_rng(0)
    primaries = list(verdict.PRIMARY.values())
    arms = [analysis.comparison_arms(comp, evals)[:3] for comp in study]
    kappa = (calibration.fit_pairing([(t, base.curves, meth.curves) for t, base, meth in arms])
             if args.observed else None)
    horizon = min(float(t[-1]) for t, _, _ in arms)
    splits = [(k, budget) for k, budget in SPLITS if budget <= horizon + 1e-9]
    for k, budget in SPLITS:
        if (k, budget) not in splits:
            print(f"{k} seeds x {budget:g} s: not evaluated (the committed runs end at {horizon:g} s)")
    rows = []
    for comp, (t, base, meth) in zip(study, arms):
        for k, budget in splits:
            keep = t <= budget + 1e-9
            cut = {"t": t[keep], "base": base.curves[:, keep], "meth": meth.curves[:, keep],
                   "paired": analysis.comparison_paired(comp), "fixed": comp.get("target_accuracy")}
            row = {"comparison": analysis.comparison_label(comp), "seeds": k, "budget_s": budget}
            for e in primaries:
                row[f"{e.name} power at minimum"] = calibration.apriori_power_at(cut, e, k)
            if args.observed:
                m_b, m_m = calibration.fit_comparison(cut["t"], cut["base"], cut["meth"])
                sims = calibration.simulate_pair(rng, m_b, m_m, args.studies, k, kappa)
                for e in primaries:
                    truth, power = observed_power(e, cut["t"], m_b, m_m, sims, rng, args.boot, 0.05 / len(study))
                    row[f"{e.name} observed effect"], row[f"{e.name} power at observed (projection)"] = truth, power
            rows.append(row)
    table = pd.DataFrame(rows)
    print(table.round(3).to_string(index=False))
    columns = [c for c in table.columns if "power" in c]
    print("\nmean power over the comparisons (a-priori at the declared minimum effects"
          + (", and the projection at the observed effects" if args.observed else "") + "):")
    print(table.groupby(["seeds", "budget_s"])[columns].mean().round(3).to_string())


if __name__ == "__main__":
    main()
