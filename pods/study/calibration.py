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

The arms of one seed share their training split, prompt order and test set, so their noises
correlate: the pair's joint model has cross-arm covariance kappa * R (R the within-arm correlation
above), kappa fitted from the correlation of the arms' per-seed mean residuals (`fit_pairing`,
pooled over a study's comparisons by Fisher's z: four seeds give one comparison's kappa to
+-0.9). Paired scenarios draw seed i of both arms jointly and analyse them paired.

What it cannot capture: seeds that split into groups (a bimodal arm: some seeds take off, some do
not), noise that changes with the curve's own level beyond sd(t), curves of a shape the
monotone mean does not have (a peak, then a fall), a pairing that differs between comparisons of
one study, and the discreteness of accuracy on a finite test set. Truths are computed on the model's
means, so "coverage" is coverage of the population quantity the endpoint estimates.

Scenarios: "fitted" (each arm from its own model: coverage, power) and "identical" (both arms
from the baseline's model: the truth is no difference, so every decision is a false one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps
from tqdm import tqdm

from pods.study import stats, verdict

SCENARIOS = ("fitted", "identical")
POWER = 0.8   # a-priori power the seed counts are planned for


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

    def noise(self, rng: np.random.Generator, studies: int, seeds: int) -> np.ndarray:
        """[studies, seeds, grid] unit-variance noise with the model's correlation over the grid."""
        chol = np.linalg.cholesky(self.correlation() + 1e-9 * np.eye(len(self.t)))
        shape = (studies, seeds, len(self.t))
        if self.tails == "t3":
            z = rng.standard_t(3, shape) / math.sqrt(3.0)
        else:
            z = rng.standard_normal(shape)
        return z @ chol.T

    def curves(self, noise: np.ndarray) -> np.ndarray:
        return np.clip(self.mean + self.sd * noise, 0.0, 1.0)

    def simulate(self, rng: np.random.Generator, studies: int, seeds: int) -> np.ndarray:
        """[studies, seeds, grid] curves drawn from the model."""
        return self.curves(self.noise(rng, studies, seeds))


def simulate_pair(rng: np.random.Generator, base: ArmModel, meth: ArmModel, studies: int, seeds: int,
                  kappa: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Both arms of `studies` studies of `seeds` seeds, seed i of the two arms correlated by `kappa`
    (cross-arm covariance kappa * R; base and meth share R, as fit_comparison fits them)."""
    z_b, z_other = base.noise(rng, studies, seeds), meth.noise(rng, studies, seeds)
    return base.curves(z_b), meth.curves(kappa * z_b + math.sqrt(max(1 - kappa ** 2, 0.0)) * z_other)


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


def fit_comparison(t: np.ndarray, base: np.ndarray, meth: np.ndarray, tails: str = "normal") -> tuple[ArmModel,
                                                                                                      ArmModel]:
    """Models of both arms (curves [seeds, grid] on grid t); the correlation pooled over the two."""
    rho, phi = fit_correlation([base - base.mean(axis=0), meth - meth.mean(axis=0)])
    return fit_arm(t, base, rho, phi, tails), fit_arm(t, meth, rho, phi, tails)


def seed_residuals(t: np.ndarray, curves: np.ndarray) -> np.ndarray:
    """Each seed's mean standardised residual over the grid after t = 0: [seeds]."""
    later = t > 0
    res = curves[:, later] - curves[:, later].mean(axis=0)
    sd = res.std(axis=0, ddof=1)
    return np.mean(np.divide(res, sd, out=np.zeros_like(res), where=sd > 0), axis=1)


def fit_pairing(pairs: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
    """kappa: the correlation between the arms' per-seed mean residuals, pooled over paired
    comparisons (t, base, meth with row i the same seed in both) by Fisher's z weighted by k - 3
    (k - 1 below 4 seeds); clipped to [-0.95, 0.95]. 0 when nothing is paired."""
    num = den = 0.0
    for t, base, meth in pairs:
        k = len(base)
        if k < 3 or len(meth) != k:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):  # a constant residual: no correlation to read
            r = np.corrcoef(seed_residuals(t, base), seed_residuals(t, meth))[0, 1]
        if not np.isfinite(r):
            continue
        w = max(k - 3, 1)
        num += w * math.atanh(float(np.clip(r, -0.95, 0.95)))
        den += w
    return float(np.clip(math.tanh(num / den), -0.95, 0.95)) if den else 0.0


def truth(e: verdict.Endpoint, t: np.ndarray, base: ArmModel, meth: ArmModel, fixed=None) -> float:
    """The population value of an endpoint (log speedup for time endpoints, difference otherwise)."""
    if e.kind == "time":
        times = stats.TIME_RULES[e.rule](t, base.mean[None, :], meth.mean[None, :], e.fraction, fixed)
        value, _ = stats.speedups(times, float(t[-1]))
        return float(stats.safe_log(value)[0])
    statistic = stats.SEED_STATISTICS[e.rule]
    return float(statistic(t, meth.mean) - statistic(t, base.mean))


def evaluate(e: verdict.Endpoint, t: np.ndarray, base: np.ndarray, meth: np.ndarray, methods, rng,
             boot: int, fixed=None, paired: bool = False) -> dict[str, tuple[np.ndarray, stats.Interval]]:
    """Estimates and intervals of endpoint `e` on simulated studies base/meth [S, k, G]: for each
    interval method, (estimate [S], Interval of [S]); log scale for time endpoints. Paired: seed i
    of both arms resampled together, per-seed endpoints by the paired t."""
    s, k, g = base.shape
    pb, pm = rng.integers(0, k, (2, s, boot, k))
    if paired:
        pm = pb
    if e.kind == "seed":
        statistic = stats.SEED_STATISTICS[e.rule]
        v_b, v_m = statistic(t, base), statistic(t, meth)            # [S, k]
        test = "paired_t" if paired else "welch"
        diff, interval = stats.SEED_TESTS[test](v_b, v_m)
        out = {test: (diff, interval)}
        boot_methods = [m for m in methods if m not in stats.SEED_TESTS and m in stats.BOOTSTRAP_INTERVALS]
        if boot_methods:  # the same per-seed values resampled: what the percentile bootstrap would say
            reps = (np.take_along_axis(v_m[:, None], pm, axis=2).mean(axis=2)
                    - np.take_along_axis(v_b[:, None], pb, axis=2).mean(axis=2))
            out.update({m: (diff, stats.BOOTSTRAP_INTERVALS[m](reps, diff, k, paired)) for m in boot_methods})
        return out
    rule = stats.TIME_RULES[e.rule]
    point = rule(t, base.mean(axis=1), meth.mean(axis=1), e.fraction, fixed)
    estimate = stats.safe_log(stats.speedups(point, float(t[-1]))[0])
    boot_b = np.take_along_axis(base[:, None], pb[..., None], axis=2).mean(axis=2)   # [S, B, G]
    boot_m = np.take_along_axis(meth[:, None], pm[..., None], axis=2).mean(axis=2)
    reps = rule(t, boot_b.reshape(-1, g), boot_m.reshape(-1, g), e.fraction, fixed)
    log_reps = stats.safe_log(stats.speedups(reps, float(t[-1]))[0]).reshape(s, boot)
    return {m: (estimate, stats.BOOTSTRAP_INTERVALS[m](log_reps, estimate, k, paired)) for m in methods}


def score(estimate: np.ndarray, interval: stats.Interval, true: float) -> dict:
    """Coverage and decision rates over ALL simulated studies: a study whose interval is undefined
    (no estimate, or an undefined or zero spread) counts as a miss for coverage and as no decision,
    and `defined` is the share of studies that had an interval at all."""
    ok = np.isfinite(estimate) & np.isfinite(interval.low) & np.isfinite(interval.high)
    lo, hi = np.where(ok, interval.low, np.nan), np.where(ok, interval.high, np.nan)
    with np.errstate(invalid="ignore"):
        covers, up, down = ok & (lo <= true) & (true <= hi), ok & (lo > 0), ok & (hi < 0)
    return {"coverage": float(covers.mean()), "decide_up": float(up.mean()), "decide_down": float(down.mean()),
            "median_estimate": float(np.median(estimate[ok])) if ok.any() else math.nan,
            "defined": float(ok.mean())}


def calibrate(comparisons: list[dict], seeds=(4, 10, 30), studies: int = 200, boot: int = 200, seed: int = 0,
              tails: str = "normal", endpoints=None, methods=None, seed_methods=("percentile",),
              progress: bool = True, primary_studies: int | None = None, shipped: int | None = None) -> pd.DataFrame:
    """One row per (comparison, scenario, k, endpoint, interval method): truth, median estimate,
    coverage, decision rates. `comparisons`: dicts with label, t, base, meth (curves [seeds, grid]),
    optionally fixed (a fixed target) and paired (row i of both arms is seed i: simulated with the
    study's pooled cross-arm correlation and analysed paired). Time endpoints get every bootstrap
    interval of `methods`; per-seed endpoints get the t test of their pairing and, for reference,
    `seed_methods` (the plain percentile bootstrap of the difference, which undercovers at a few
    seeds). `primary_studies` simulated studies (more than `studies`) serve the declared primaries at
    the `shipped` seed count, where the verdict's own calibration is read: 500 or more put a
    coverage's Monte-Carlo error under 0.01 (200 give 0.015); each row records its `studies`."""
    endpoints = [verdict.ENDPOINTS[n] for n in (endpoints or verdict.CALIBRATED)]
    methods = list(methods or stats.BOOTSTRAP_INTERVALS.names())
    kappa = fit_pairing([(c["t"], c["base"], c["meth"]) for c in comparisons if c.get("paired")])
    rng = np.random.default_rng(seed)
    rows = []
    jobs = [(c, sc, k) for c in comparisons for sc in SCENARIOS for k in seeds]
    for comp, scenario, k in tqdm(jobs, desc="calibrate", disable=not progress):
        t, paired = comp["t"], bool(comp.get("paired"))
        m_b, m_m = fit_comparison(t, comp["base"], comp["meth"], tails)
        if scenario == "identical":
            m_m = m_b
        many = primary_studies if primary_studies and k == shipped else None
        sims = {n: simulate_pair(rng, m_b, m_m, n, k, kappa if paired else 0.0)
                for n in sorted({studies, many} - {None})}
        for e in endpoints:
            n = many if many and e.role == "primary" else studies
            base, meth = sims[n]
            if e.rule == "fixed" and comp.get("fixed") is None:
                continue
            true = truth(e, t, m_b, m_m, comp.get("fixed"))
            test = "paired_t" if paired else "welch"
            chosen = methods if e.kind == "time" else [test] + [m for m in seed_methods]
            for method, (est, interval) in evaluate(e, t, base, meth, chosen, rng, boot, comp.get("fixed"),
                                                    paired).items():
                row = {"comparison": comp["label"], "scenario": scenario, "seeds": k, "studies": n,
                       "endpoint": e.name,
                       "role": e.role, "interval_method": method, "pairing": "seed" if paired else "none",
                       "kappa": kappa if paired else 0.0,
                       "truth": math.exp(true) if e.log_scale else true, **score(est, interval, true)}
                if e.log_scale and math.isfinite(row["median_estimate"]):
                    row["median_estimate"] = math.exp(row["median_estimate"])
                rows.append(row)
    table = pd.DataFrame(rows)
    # power: deciding in the truth's direction under the fitted model; the null's decisions are false
    truth_up = table.apply(lambda r: (math.log(r.truth) if verdict.ENDPOINTS[r.endpoint].log_scale
                                      else r.truth) > 0, axis=1)
    table["power"] = np.where(table["scenario"] == "fitted",
                              np.where(truth_up, table["decide_up"], table["decide_down"]), np.nan)
    return table


def inputs_digest(comparisons: list[dict], **settings) -> str:
    """sha256 of everything a calibration table depends on: each comparison's label, grid, curves,
    target and pairing, the settings (seed counts, studies, resamples, RNG seed, ...), and the source
    of the modules that compute it. A table recorded with the same digest is the table this would
    compute (the harness is deterministic given its seed), so it is reused instead of recomputed."""
    import hashlib
    import inspect

    h = hashlib.sha256()
    for comp in comparisons:
        h.update(repr((comp["label"], comp.get("fixed"), bool(comp.get("paired")))).encode())
        for key in ("t", "base", "meth"):
            h.update(np.ascontiguousarray(comp[key], dtype=float).tobytes())
    h.update(repr(sorted(settings.items())).encode())
    for module in (stats, verdict):
        h.update(inspect.getsource(module).encode())
    h.update(inspect.getsource(inspect.getmodule(inputs_digest)).encode())
    return h.hexdigest()


COVERAGE_BAND = (0.93, 0.97)   # the declared rule's coverage band at the shipped seed count
FALSE_SIDE = 0.025             # and its bound on false decisions per side under no difference
DEFINED_MIN = 0.99             # and the share of simulated studies that must have an interval at all


def choose_interval(table: pd.DataFrame, endpoint: str, seeds: int) -> tuple[str | None, pd.DataFrame]:
    """The declared rule (docs/verdict.md): among the interval methods calibrated for `endpoint` at
    `seeds` seeds, those that cover at least COVERAGE_BAND[0] on every comparison and scenario,
    cover at most COVERAGE_BAND[1] in the median (the most powerful calibrated method, not the
    widest) and decide falsely at most FALSE_SIDE per side under no difference, each bound up to
    its Monte-Carlo tolerance, and give an interval in at least DEFINED_MIN of the simulated studies
    of every cell (for a worst cell the 5% Bonferroni quantile over the cells checked,
    in standard errors; for the median two); of those, the one with the highest median power. When none
    meets the upper coverage bound, the most powerful one that meets the others (it over-covers:
    `meets_rule` says so). Returns (method or None, the per-method summary it was chosen from)."""
    rows = table[(table["endpoint"] == endpoint) & (table["seeds"] == seeds)]
    if rows.empty:
        return None, pd.DataFrame()
    studies = int(rows["studies"].min()) if "studies" in rows else table.attrs.get("studies", 200)
    # each bound is checked on every cell (comparison x scenario, both sides for false decisions):
    # a calibrated method's worst cell exceeds a bound by Monte-Carlo chance alone, so the
    # tolerance is the Bonferroni 5% quantile over the cells, in Monte-Carlo standard errors
    cells = max(int(rows.groupby("interval_method").size().max()), 1)
    tol = float(sps.norm.isf(0.05 / (2 * cells)))
    se_cover = tol * math.sqrt(0.95 * 0.05 / studies)
    se_false = tol * math.sqrt(FALSE_SIDE * (1 - FALSE_SIDE) / studies)
    summary = []
    for method, g in rows.groupby("interval_method"):
        fitted, null = g[g["scenario"] == "fitted"], g[g["scenario"] == "identical"]
        false = float(np.nanmax(np.r_[null["decide_up"].to_numpy(float), null["decide_down"].to_numpy(float)]))
        summary.append({"endpoint": endpoint, "seeds": seeds, "interval_method": method,
                        "studies": int(g["studies"].min()) if "studies" in g else studies,
                        "defined_min": float(np.nanmin(g["defined"])) if "defined" in g else math.nan,
                        "coverage_min": float(np.nanmin(g["coverage"])),
                        "coverage_median": float(np.nanmedian(g["coverage"])),
                        "coverage_max": float(np.nanmax(g["coverage"])), "false_side_max": false,
                        "power_median": float(np.nanmedian(fitted["power"]))})
    summary = pd.DataFrame(summary).sort_values("power_median", ascending=False, kind="stable")
    valid = ((summary["coverage_min"] >= COVERAGE_BAND[0] - se_cover)
             & (summary["false_side_max"] <= FALSE_SIDE + se_false)
             & ~(summary["defined_min"] < DEFINED_MIN))
    # the median is one number, not a worst cell: two Monte-Carlo standard errors
    median_ok = summary["coverage_median"] <= COVERAGE_BAND[1] + 2 * math.sqrt(0.95 * 0.05 / studies)
    summary["meets_rule"] = valid & median_ok
    for column in ("meets_rule",):
        if summary[column].any():
            return str(summary[summary[column]]["interval_method"].iloc[0]), summary
    return (str(summary[valid]["interval_method"].iloc[0]) if valid.any() else None), summary


def t_test_power(sd: float, effect: float, k: int, paired: bool = True, alpha: float = stats.ALPHA) -> float:
    """Power of a two-sided t test at `alpha` for a true difference `effect` with k seeds per arm (k
    pairs when paired), per-seed values of standard deviation `sd` (of the paired differences when
    paired, of either arm otherwise): the noncentral t's exact power (scipy.stats.nct). NaN without
    a usable SD."""
    if not (math.isfinite(sd) and sd > 0) or k < 2:
        return math.nan
    df = k - 1 if paired else 2 * k - 2
    nc = abs(effect) / (sd / math.sqrt(k) if paired else sd * math.sqrt(2 / k))
    q = sps.t.ppf(1 - alpha / 2, df)
    return float(sps.nct.sf(q, df, nc) + sps.nct.cdf(-q, df, nc))


def seeds_for_power(sd: float, effect: float, alpha: float = stats.ALPHA, power: float = POWER,
                    paired: bool = True, limit: int = 1000) -> float:
    """A-priori power: the fewest seeds per arm (pairs when paired) at which `t_test_power` reaches
    `power` for a true difference `effect`; inf past `limit` or without a usable SD or effect."""
    if not (sd > 0 and effect != 0 and math.isfinite(sd)):
        return math.inf
    return next((float(k) for k in range(2, limit + 1) if t_test_power(sd, effect, k, paired, alpha) >= power),
                math.inf)


def sd_upper(sd: float, df: int, confidence: float = 0.8) -> float:
    """The one-sided upper `confidence` bound of a standard deviation estimated on `df` degrees of
    freedom (chi-square): the design-stage SD a cautious a-priori power calculation plans with."""
    return float(sd * math.sqrt(df / sps.chi2.ppf(1 - confidence, df))) if df >= 1 else math.inf


def predictive_check(t: np.ndarray, curves: np.ndarray, statistic: str = "mean_accuracy", sims: int = 4000,
                     seed: int = 0) -> np.ndarray:
    """Does the population model predict seeds it was not fitted to? Leave one seed out: fit the
    arm's model to the other seeds, draw `sims` seeds from it, and place the held-out seed's
    per-seed statistic in that predictive distribution (widened by the uncertainty of a mean of
    k - 1 seeds, and read through Student's t on k - 2 degrees of freedom: the spread itself is
    estimated from k - 1 seeds). Returns the held-out z-scores [seeds]; over a study they should
    look standard normal: a spread well above 1 means the model underestimates how much new runs
    vary."""
    k = len(curves)
    f = stats.SEED_STATISTICS[statistic]
    rng = np.random.default_rng(seed)
    z = np.full(k, np.nan)
    if k < 3:
        return z
    for i in range(k):
        rest = np.delete(curves, i, axis=0)
        rho, phi = fit_correlation([rest - rest.mean(axis=0)])
        drawn = f(t, fit_arm(t, rest, rho, phi).simulate(rng, 1, sims)[0])
        sd = float(np.std(drawn, ddof=1)) * math.sqrt(1 + 1 / (k - 1))
        z[i] = (float(f(t, curves[i])) - float(np.mean(f(t, rest)))) / sd if sd > 0 else np.nan
    # the model's spread is estimated from the k - 1 other seeds, so the standardised held-out value
    # is Student-t on k - 2 degrees of freedom under a right model (the prediction interval of a new
    # observation), not standard normal: read on the normal scale through its t probability. Read
    # against N(0, 1) (the check before), a right model fails at 6 seeds: RMS z sqrt(2) for t on 4 df
    # (tests/study/test_stats.py simulates it).
    return sps.norm.ppf(sps.t.cdf(z, k - 2))


def predictive_summary(z: np.ndarray) -> dict:
    """Held-out z-scores pooled over a study: their RMS (1 under a right model), the share inside
    +-1.96 (0.95), and the chi-square test of sum z^2 (two-sided p)."""
    z = z[np.isfinite(z)]
    if not len(z):
        return {"held_out": 0, "rms_z": math.nan, "inside_95": math.nan, "p_value": math.nan}
    chi = float(np.sum(z ** 2))
    p = 2 * min(sps.chi2.cdf(chi, len(z)), sps.chi2.sf(chi, len(z)))
    return {"held_out": int(len(z)), "rms_z": float(np.sqrt(np.mean(z ** 2))),
            "inside_95": float(np.mean(np.abs(z) <= 1.96)), "p_value": float(min(p, 1.0))}


def mc_se(rate: float, studies: int) -> float:
    """The Monte-Carlo standard error of a rate estimated from `studies` simulated studies."""
    return math.sqrt(rate * (1 - rate) / studies) if studies > 0 else math.nan


def predictive_line(comparisons: list[dict]) -> str:
    """The predictive check over a study's comparisons in one sentence: every comparison's two arms
    (an arm that serves two comparisons is held out in each)."""
    z = np.concatenate([predictive_check(c["t"], arm) for c in comparisons for arm in (c["base"], c["meth"])]
                       or [np.array([])])
    check = predictive_summary(z)
    return (f"Predictive check of the population model (leave one seed out, mean_accuracy, {check['held_out']} "
            f"held-out runs, read through Student's t): RMS z {check['rms_z']:.2f} (1 under the model), "
            f"{check['inside_95']:.0%} inside the 95% predictive interval, p = {check['p_value']:.2g}"
            + (" (passes: p >= 0.05)" if check["p_value"] >= 0.05 else " (fails: p < 0.05)"))


SECONDARY_TIMES = ("paper_0.99", "isotonic_0.99")  # time to 99% of the peak: the paper's rule, and its fit


def report(table: pd.DataFrame, comparisons: list[dict], seeds: int) -> str:
    """What `pods calibrate` prints for the declared primaries at the shipped seed count: the
    interval the declared rule chooses with the share of simulated studies that had an interval,
    its coverage (a missing interval counted as a miss) and false decisions, the a-priori power at
    the minimum effect (planning SD: each comparison's own, paired where the study pairs), the
    leave-one-seed-out predictive check of the population model, and the bias and power of the
    time-to-peak secondaries wherever they are shown."""
    lines = [f"## Declared primaries at {seeds} seeds per arm (docs/verdict.md)", "",
             "| endpoint | minimum effect | interval (declared rule) | studies | with an interval min | "
             "coverage min-max (a missing interval is a miss) | false per side max | "
             "power at the minimum effect (median over comparisons) |", "|---|---|---|---|---|---|---|---|"]
    for q, e in verdict.PRIMARY.items():
        chosen, summary = choose_interval(table, e.name, seeds)
        row = summary[summary["interval_method"] == (chosen or e.interval)] if len(summary) else summary
        powers = [apriori_power_at(c, e, seeds) for c in comparisons]
        effect = math.exp(e.minimum_effect) if e.log_scale else e.minimum_effect
        cells = ["not calibrated", "", "", "", ""]
        if len(row):
            r = row.iloc[0]
            cells = [f"{chosen or 'none meets the rule'}", f"{int(r.studies)}", f"{r.defined_min:.3f}",
                     f"{r.coverage_min:.3f}-{r.coverage_max:.3f}", f"{r.false_side_max:.3f}"]
        power = float(np.median(np.array(powers)[np.isfinite(powers)])) if np.isfinite(powers).any() else math.nan
        lines.append(f"| {e.name} | {effect:g} | " + " | ".join(cells) + f" | {power:.2f} |")
    studies = int(table.loc[table["seeds"] == seeds, "studies"].max()) if (table["seeds"] == seeds).any() else 0
    if studies:
        lines += ["", f"Monte-Carlo standard errors at {studies} simulated studies: "
                  f"{mc_se(0.95, studies):.4f} on a coverage, {mc_se(stats.ALPHA / 2, studies):.4f} on a "
                  f"{stats.ALPHA / 2:.1%} error rate. The targets (docs/verdict.md): an interval in at least 99% of "
                  f"studies, coverage in [0.93, 0.97], false decisions at most {stats.ALPHA / 2:.3f} per side plus two "
                  f"of these errors ({stats.ALPHA / 2 + 2 * mc_se(stats.ALPHA / 2, studies):.4f}): an exact test reads "
                  f"above {stats.ALPHA / 2:.3f} in half of its cells by chance alone."]
    lines += ["", predictive_line(comparisons), ""]
    secondary = table[table["endpoint"].isin(SECONDARY_TIMES) & (table["seeds"] == seeds)
                      & (table["scenario"] == "fitted") & (table["interval_method"] == "hull")]
    if len(secondary):
        lines += [f"Time to 99% of the baseline's peak (secondary, `hull`) at {seeds} seeds under the same models: "
                  "how far its median estimate sits from the truth, and how often it decides a true effect", "",
                  "| comparison | endpoint | truth | median estimate | power |", "|---|---|---|---|---|"]
        for r in secondary.to_dict("records"):
            lines.append(f"| {r['comparison']} | {r['endpoint']} | {r['truth']:.2f} | {r['median_estimate']:.2f} | "
                         f"{r['power']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def apriori_power_at(comp: dict, e: verdict.Endpoint, seeds: int) -> float:
    """Power of the endpoint's test at `seeds` pairs (or seeds per arm, unpaired) for its minimum
    effect, planning with the comparison's per-seed SD: of the per-seed differences for a per-seed
    endpoint, of the log speedup (joint-seed bootstrap SD x sqrt(k) x sqrt(k/(k-1))) for a time one."""
    paired = bool(comp.get("paired")) and len(comp["base"]) == len(comp["meth"])
    if e.kind == "seed":
        f = stats.SEED_STATISTICS[e.rule]
        v_b, v_m = f(comp["t"], comp["base"]), f(comp["t"], comp["meth"])
        sd = (float(np.std(v_m - v_b, ddof=1)) if paired
              else float(np.sqrt((np.var(v_b, ddof=1) + np.var(v_m, ddof=1)) / 2)))
    else:
        steps = np.full_like(comp["base"], np.nan)
        record = verdict.compare(comp["t"], verdict.Arm(comp["base"], steps), verdict.Arm(comp["meth"], steps),
                                 endpoints=[e.name], n_boot=400, paired=paired, fixed_target=comp.get("fixed"))
        sd = float(record[0].get("unit_sd", math.nan)) if record else math.nan
    return t_test_power(sd, e.minimum_effect, seeds, paired)


def calibration_markdown(table: pd.DataFrame) -> str:
    """Per endpoint and interval method, at each seed count: the share of simulated studies with an
    interval, coverage (fitted | identical; a missing interval is a miss), the false-decision rates
    per side under identical arms, power and the median estimate vs truth."""
    lines = ["| comparison | endpoint | interval | seeds | truth | median est. | with an interval | "
             "coverage (fitted) | coverage (identical) | false up | false down | power |", "|" + "---|" * 12]
    fitted = table[table["scenario"] == "fitted"].set_index(["comparison", "endpoint", "interval_method", "seeds"])
    null = table[table["scenario"] == "identical"].set_index(["comparison", "endpoint", "interval_method", "seeds"])
    f = lambda v, d=3: "" if v is None or (isinstance(v,
                                                      float) and not math.isfinite(v)) else f"{v:.{d}f}"  # noqa: E731
    for key, r in fitted.iterrows():
        n = null.loc[key] if key in null.index else None
        lines.append("| " + " | ".join([
            key[0], key[1], key[2], str(key[3]), f(r["truth"]), f(r["median_estimate"]), f(r.get("defined")),
            f(r["coverage"]),
            f(n["coverage"]) if n is not None else "", f(n["decide_up"]) if n is not None else "",
            f(n["decide_down"]) if n is not None else "", f(r["power"])]) + " |")
    return "\n".join(lines) + "\n"
