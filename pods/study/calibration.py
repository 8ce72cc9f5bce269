"""The calibration harness: how often each endpoint's interval covers the truth, decides wrongly
under no difference, and decides at all, at a given number of seeds (`pods calibrate`, whose
command line is in `pods.study.views`).

The population model of one arm (fitted to that arm's seeds on the comparison's grid):

    accuracy(seed, t) = mean(t) + sd(t) * e(seed, t),  clipped to [0, 1]
    mean  = the monotone (isotonic) fit of the arm's mean curve: the "true" curve
    sd    = the seeds' standard deviation at each time, smoothed over 5 neighbouring evaluations
            (0 at t = 0: every seed evaluates the same base model)
    e     = a unit-variance Gaussian (or t with 3 df: `tails="t3"`) process over the grid with
            correlation  rho + (1 - rho) * phi ** |i - j|  -- a per-seed shift (rho) plus AR(1)
            evaluation noise (phi), fitted by least squares to the residuals' correlations, pooled
            over the comparison's two arms

What it cannot capture: seeds that split into groups (a bimodal arm: some seeds take off, some do
not), noise that changes with the curve's own level beyond sd(t), curves of a shape the
monotone mean does not have (a peak, then a fall), correlation between the arms of a seed (they
share the base model and the test set, not their noise), and the discreteness of accuracy on a
finite test set. Truths are computed on the model's means, so "coverage" is coverage of the
population quantity the endpoint estimates.

Scenarios: "fitted" (each arm from its own model: coverage, power) and "identical" (both arms
from the baseline's model: the truth is no difference, so every decision is a false one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm import tqdm

from pods.study import stats, verdict

SCENARIOS = ("fitted", "identical")
LADDER = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50)   # seed counts seeds_to_decide tries
POWER = 0.8


def _smooth(x: np.ndarray, width: int = 5) -> np.ndarray:
    pad = width // 2
    padded = np.pad(x, pad, mode="edge")
    return np.convolve(padded, np.ones(width) / width, mode="valid")


@dataclass
class ArmModel:
    t: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    rho: float
    phi: float
    tails: str = "normal"

    def correlation(self) -> np.ndarray:
        lag = np.abs(np.arange(len(self.t))[:, None] - np.arange(len(self.t))[None, :])
        return self.rho + (1 - self.rho) * self.phi ** lag

    def simulate(self, rng: np.random.Generator, studies: int, seeds: int) -> np.ndarray:
        """[studies, seeds, grid] curves drawn from the model."""
        chol = np.linalg.cholesky(self.correlation() + 1e-9 * np.eye(len(self.t)))
        shape = (studies, seeds, len(self.t))
        if self.tails == "t3":
            z = rng.standard_t(3, shape) / math.sqrt(3.0)
        else:
            z = rng.standard_normal(shape)
        return np.clip(self.mean + self.sd * (z @ chol.T), 0.0, 1.0)


def fit_correlation(residuals: list[np.ndarray]) -> tuple[float, float]:
    """(rho, phi) minimising the squared distance to the pooled residual correlation matrix."""
    standardized = []
    for r in residuals:
        sd = r.std(axis=0, ddof=1)
        keep = sd > 0
        standardized.append((r[:, keep] / sd[keep], np.flatnonzero(keep)))
    g = max((r.shape[1] for r in residuals), default=1)
    num, den = np.zeros((g, g)), np.zeros((g, g))
    for z, idx in standardized:
        if len(z) < 2 or not idx.size:
            continue
        c = (z.T @ z) / (len(z) - 1)
        num[np.ix_(idx, idx)] += c * (len(z) - 1)
        den[np.ix_(idx, idx)] += len(z) - 1
    observed = np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)
    lag = np.abs(np.arange(g)[:, None] - np.arange(g)[None, :])
    off = (lag > 0) & np.isfinite(observed)
    if not off.any():
        return 0.0, 0.0
    best = (math.inf, 0.0, 0.0)
    for rho in np.linspace(0, 0.95, 20):
        for phi in np.linspace(0, 0.95, 20):
            model = rho + (1 - rho) * phi ** lag
            err = float(np.sum((model[off] - observed[off]) ** 2))
            if err < best[0]:
                best = (err, float(rho), float(phi))
    return best[1], best[2]


def fit_arm(t: np.ndarray, curves: np.ndarray, rho: float, phi: float, tails: str = "normal") -> ArmModel:
    mean = stats.isotonic_fits(curves.mean(axis=0))
    sd = curves.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros(len(t))
    later = t > 0
    sd = sd.copy()
    sd[later] = _smooth(sd[later])
    return ArmModel(np.asarray(t, float), mean, sd, rho, phi, tails)


def fit_comparison(t: np.ndarray, base: np.ndarray, meth: np.ndarray, tails: str = "normal") -> tuple[ArmModel, ArmModel]:
    """Models of both arms (curves [seeds, grid] on grid t); the correlation pooled over the two."""
    rho, phi = fit_correlation([base - base.mean(axis=0), meth - meth.mean(axis=0)])
    return fit_arm(t, base, rho, phi, tails), fit_arm(t, meth, rho, phi, tails)


def truth(e: verdict.Endpoint, t: np.ndarray, base: ArmModel, meth: ArmModel, fixed=None) -> float:
    """The population value of an endpoint (log speedup for time endpoints, difference otherwise)."""
    if e.kind == "time":
        times = stats.TIME_RULES[e.rule](t, base.mean[None, :], meth.mean[None, :], e.fraction, fixed)
        value, _ = stats.speedups(times, float(t[-1]))
        return float(stats.safe_log(value)[0])
    statistic = stats.SEED_STATISTICS[e.rule]
    return float(statistic(t, meth.mean) - statistic(t, base.mean))


def evaluate(e: verdict.Endpoint, t: np.ndarray, base: np.ndarray, meth: np.ndarray, methods, rng,
             boot: int, fixed=None) -> dict[str, tuple[np.ndarray, stats.Interval]]:
    """Estimates and intervals of endpoint `e` on simulated studies base/meth [S, k, G]: for each
    interval method, (estimate [S], Interval of [S]); log scale for time endpoints."""
    s, k, g = base.shape
    pb, pm = rng.integers(0, k, (2, s, boot, k))
    if e.kind == "seed":
        statistic = stats.SEED_STATISTICS[e.rule]
        v_b, v_m = statistic(t, base), statistic(t, meth)            # [S, k]
        diff, interval = stats.welch(v_b, v_m)
        out = {"welch": (diff, interval)}
        boot_methods = [m for m in methods if m != "welch" and m in stats.BOOTSTRAP_INTERVALS]
        if boot_methods:  # the same per-seed values resampled: what the percentile bootstrap would say
            reps = (np.take_along_axis(v_m[:, None], pm, axis=2).mean(axis=2)
                    - np.take_along_axis(v_b[:, None], pb, axis=2).mean(axis=2))
            out.update({m: (diff, stats.BOOTSTRAP_INTERVALS[m](reps, diff, k)) for m in boot_methods})
        return out
    rule = stats.TIME_RULES[e.rule]
    point = rule(t, base.mean(axis=1), meth.mean(axis=1), e.fraction, fixed)
    estimate = stats.safe_log(stats.speedups(point, float(t[-1]))[0])
    boot_b = np.take_along_axis(base[:, None], pb[..., None], axis=2).mean(axis=2)   # [S, B, G]
    boot_m = np.take_along_axis(meth[:, None], pm[..., None], axis=2).mean(axis=2)
    reps = rule(t, boot_b.reshape(-1, g), boot_m.reshape(-1, g), e.fraction, fixed)
    log_reps = stats.safe_log(stats.speedups(reps, float(t[-1]))[0]).reshape(s, boot)
    return {m: (estimate, stats.BOOTSTRAP_INTERVALS[m](log_reps, estimate, k)) for m in methods}


def score(estimate: np.ndarray, interval: stats.Interval, true: float) -> dict:
    ok = np.isfinite(estimate) & np.isfinite(interval.low) & np.isfinite(interval.high)
    lo, hi, est = interval.low[ok], interval.high[ok], estimate[ok]
    if not ok.any():
        return {"coverage": math.nan, "decide_up": math.nan, "decide_down": math.nan, "median_estimate": math.nan,
                "defined": 0.0}
    return {"coverage": float(np.mean((lo <= true) & (true <= hi))), "decide_up": float(np.mean(lo > 0)),
            "decide_down": float(np.mean(hi < 0)), "median_estimate": float(np.median(est)),
            "defined": float(ok.mean())}


def calibrate(comparisons: list[dict], seeds=(4, 10, 30), studies: int = 200, boot: int = 200, seed: int = 0,
              tails: str = "normal", endpoints=None, methods=None, seed_methods=("percentile",),
              progress: bool = True) -> pd.DataFrame:
    """One row per (comparison, scenario, k, endpoint, interval method): truth, median estimate,
    coverage, decision rates. `comparisons`: dicts with label, t, base, meth (curves [seeds, grid])
    and optionally fixed (a fixed target). Time endpoints get every bootstrap interval of
    `methods`; per-seed endpoints get Welch's and, for reference, `seed_methods` (the plain
    percentile bootstrap of the difference, which undercovers at a few seeds)."""
    endpoints = [verdict.ENDPOINTS[n] for n in (endpoints or ["isotonic_0.99", "paper_0.99", "mean_accuracy",
                                                              "accuracy_at_T", "last_quarter"])]
    methods = list(methods or stats.BOOTSTRAP_INTERVALS.names())
    rng = np.random.default_rng(seed)
    rows = []
    jobs = [(c, sc, k) for c in comparisons for sc in SCENARIOS for k in seeds]
    for comp, scenario, k in tqdm(jobs, desc="calibrate", disable=not progress):
        t = comp["t"]
        m_b, m_m = fit_comparison(t, comp["base"], comp["meth"], tails)
        if scenario == "identical":
            m_m = m_b
        base, meth = m_b.simulate(rng, studies, k), m_m.simulate(rng, studies, k)
        for e in endpoints:
            if e.rule == "fixed" and comp.get("fixed") is None:
                continue
            true = truth(e, t, m_b, m_m, comp.get("fixed"))
            chosen = methods if e.kind == "time" else ["welch"] + [m for m in seed_methods]
            for method, (est, interval) in evaluate(e, t, base, meth, chosen, rng, boot, comp.get("fixed")).items():
                row = {"comparison": comp["label"], "scenario": scenario, "seeds": k, "endpoint": e.name,
                       "role": e.role, "interval_method": method,
                       "truth": math.exp(true) if e.log_scale else true, **score(est, interval, true)}
                if e.log_scale and math.isfinite(row["median_estimate"]):
                    row["median_estimate"] = math.exp(row["median_estimate"])
                rows.append(row)
    table = pd.DataFrame(rows)
    # power: deciding in the truth's direction under the fitted model; the null's decisions are false
    table["power"] = np.where(table["scenario"] == "fitted",
                              np.where(table.apply(lambda r: (math.log(r.truth) if verdict.ENDPOINTS[r.endpoint].log_scale
                                                              else r.truth) > 0, axis=1),
                                       table["decide_up"], table["decide_down"]), np.nan)
    return table


def seeds_to_decide(t: np.ndarray, base: np.ndarray, meth: np.ndarray, endpoint: str, alpha: float,
                    studies: int = 100, boot: int = 100, seed: int = 0, fixed=None) -> float:
    """The smallest seed count per arm (from LADDER) at which at least 80% of studies simulated
    from the fitted models decide in the direction of the fitted truth at level `alpha` (the
    study's per-test level after its multiplicity adjustment); inf past the ladder's end.

    It assumes the effect is as large as the fitted model says (the point estimate): an effect
    overestimated by a few seeds makes the answer optimistic."""
    e = verdict.ENDPOINTS[endpoint]
    m_b, m_m = fit_comparison(t, base, meth)
    true = truth(e, t, m_b, m_m, fixed)
    if not math.isfinite(true) or true == 0:
        return math.inf
    rng = np.random.default_rng(seed)

    def decides(k: int) -> float:
        sim_b, sim_m = m_b.simulate(rng, studies, k), m_m.simulate(rng, studies, k)
        est, interval = evaluate(e, t, sim_b, sim_m, [e.interval], rng, boot, fixed)[e.interval]
        right = est > 0 if true > 0 else est < 0
        return float(np.mean((interval.p_value < alpha) & right))

    lo, hi = 0, len(LADDER) - 1
    if decides(LADDER[hi]) < POWER:
        return math.inf
    while lo < hi:   # power grows with k: bisection on the ladder
        mid = (lo + hi) // 2
        if decides(LADDER[mid]) >= POWER:
            hi = mid
        else:
            lo = mid + 1
    return float(LADDER[lo])


def calibration_markdown(table: pd.DataFrame) -> str:
    """Per endpoint and interval method, at each seed count: coverage (fitted | identical), the
    false-decision rates per side under identical arms, power and the median estimate vs truth."""
    lines = ["| comparison | endpoint | interval | seeds | truth | median est. | coverage (fitted) | "
             "coverage (identical) | false up | false down | power |", "|" + "---|" * 11]
    fitted = table[table["scenario"] == "fitted"].set_index(["comparison", "endpoint", "interval_method", "seeds"])
    null = table[table["scenario"] == "identical"].set_index(["comparison", "endpoint", "interval_method", "seeds"])
    f = lambda v, d=3: "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{d}f}"  # noqa: E731
    for key, r in fitted.iterrows():
        n = null.loc[key] if key in null.index else None
        lines.append("| " + " | ".join([
            key[0], key[1], key[2], str(key[3]), f(r["truth"]), f(r["median_estimate"]), f(r["coverage"]),
            f(n["coverage"]) if n is not None else "", f(n["decide_up"]) if n is not None else "",
            f(n["decide_down"]) if n is not None else "", f(r["power"])]) + " |")
    return "\n".join(lines) + "\n"
