"""Which split of the default study's ~60 minutes buys the most power (docs/embedded-default.md).

The default study trains 6 runs per seed (2 benchmarks x 3 arms), two at a time on 2 cores, so
seeds x budget per run is fixed at about 4 x 240 s. For each split (k seeds x T seconds) this
fits the calibration harness's population model (pods.study.calibration) to the committed runs cut at
T, simulates studies of k seed pairs from it (the arms of a seed correlated as the harness fits
them), and prints the share that decide each declared primary endpoint (docs/verdict.md) at the
study's Bonferroni level (5% / 4 comparisons): the power each split would have if the effects
were as the committed runs estimate them (a design-stage projection, labelled as one). Splits with
T > 240 s cannot be evaluated from runs of 240 s.

    python benchmarks/power_budget.py [--runs results] [--studies 300]
"""
import argparse

import numpy as np
import pandas as pd

from pods.study import analysis, calibration, verdict
from pods.study.curves import load_runs

SPLITS = ((4, 240.0), (5, 195.0), (6, 165.0), (8, 120.0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="results")
    p.add_argument("--study", default="results/study.yaml")
    p.add_argument("--studies", type=int, default=300)
    p.add_argument("--boot", type=int, default=200)
    args = p.parse_args()
    study = analysis.load_study(args.study)
    evals = load_runs(args.runs).evals
    alpha = 0.05 / len(study)
    rng = np.random.default_rng(0)
    rows = []
    arms = [analysis.comparison_arms(comp, evals)[:3] for comp in study]
    kappa = calibration.fit_pairing([(t, base.curves, meth.curves) for t, base, meth in arms])
    names = [e.name for e in verdict.PRIMARY.values()]
    for comp, (t, base, meth) in zip(study, arms):
        for k, budget in SPLITS:
            keep = t <= budget + 1e-9
            m_b, m_m = calibration.fit_comparison(t[keep], base.curves[:, keep], meth.curves[:, keep])
            sim_b, sim_m = calibration.simulate_pair(rng, m_b, m_m, args.studies, k, kappa)
            row = {"comparison": analysis.comparison_label(comp), "seeds": k, "budget_s": budget}
            for name in names:
                e = verdict.ENDPOINTS[name]
                true = calibration.truth(e, t[keep], m_b, m_m)
                est, iv = next(iter(calibration.evaluate(e, t[keep], sim_b, sim_m, [e.interval], rng, args.boot,
                                                         paired=True).values()))
                right = est > 0 if true > 0 else est < 0
                row[f"{name} truth"] = float(np.exp(true)) if e.log_scale else true
                row[f"{name} power"] = float(np.mean((iv.p_value < alpha) & right))
            rows.append(row)
    table = pd.DataFrame(rows)
    print(table.round(3).to_string(index=False))
    print("\nmean power over the comparisons:")
    print(table.groupby(["seeds", "budget_s"])[[f"{name} power" for name in names]].mean().round(3))


if __name__ == "__main__":
    main()
