"""The verdict of one comparison: its endpoints, each with an estimate, an interval, a p-value and
a decision, and the study-wide multiplicity adjustment over the primary endpoints.

Two questions, kept apart in every table (docs/verdict.md declares them, with the calibration that
chose each interval):

  (a) the paper's claim: how much sooner does the method reach the baseline's accuracy?
      primary: `gain_profile` (the geometric-mean speedup over 10-90% of the gain both arms
      reach); the paper's own rule (`paper_0.99`, time to 99% of the baseline's peak) is the
      headline secondary, with `isotonic_0.99`, the half-gain level, the fixed-target rule and a
      log-rank test of the per-seed times.
  (b) does the method learn faster on this hardware within this budget?
      primary: `mean_accuracy` (mean accuracy over the budget, per seed; the paired t where the
      arms are paired by seed, Welch's otherwise); accuracy at T, at T/2 and over the last quarter
      are secondary.

Each primary has a minimum effect of interest, declared before the data, at which a-priori power
is planned. The primary endpoints of a study form one family per question, adjusted by
`MULTIPLICITY`; a confirmation tests them in a fixed sequence (pods.study.confirm).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pods.registry import Registry
from pods.study import stats

MULTIPLICITY = "holm"   # stats.ADJUSTMENTS: family-wise error over each question's primary endpoints
QUESTIONS = {
    "a": "reaches the baseline's accuracy sooner (the paper's claim)",
    "b": "learns faster within the budget",
}


@dataclass(frozen=True)
class Endpoint:
    """One row of a comparison's verdict.

    name: the endpoint's name in every table. question: "a" or "b" (QUESTIONS). role: "primary"
    (one per question, adjusted for multiplicity) or "secondary" (reported, not adjusted).
    kind: "time" (a stats.TIME_RULES rule on the mean curves, log speedup, a bootstrap interval),
    "seed" (a stats.SEED_STATISTICS value per seed, difference of means, Welch) or "logrank".
    rule / fraction: the time rule or seed statistic, and the fraction of the target for time rules.
    interval: a stats.BOOTSTRAP_INTERVALS name for time endpoints (chosen with the calibration
    harness, docs/verdict.md), "welch" for seed endpoints, "logrank" for the log-rank test.
    target_rule / target: the older two-column name of the row (kept in summary.csv).
    minimum_effect: for a primary, the smallest effect worth detecting, declared before the data
    (docs/verdict.md), on the endpoint's test scale (log speedup, accuracy difference): a-priori
    power is computed at it, never at the observed effect.
    """

    name: str
    question: str
    role: str
    kind: str
    rule: str
    fraction: float = 0.99
    interval: str = "welch"
    target_rule: str = ""
    target: str = ""
    minimum_effect: float | None = None

    @property
    def log_scale(self) -> bool:
        return self.kind == "time"

    @property
    def null(self) -> float:
        return 1.0 if self.kind == "time" else 0.0

    @property
    def words(self) -> tuple[str, str]:
        return ("faster", "slower") if self.kind in ("time", "logrank") else ("higher", "lower")


ENDPOINTS: Registry[Endpoint] = Registry("endpoint")
for _e in (
    # (a): the geometric-mean speedup over 10-90% of the gain both arms reach (docs/verdict.md:
    # chosen on the exploratory seeds for its conditioning; time to the peak is the headline
    # secondary, ill-conditioned while the baseline still rises at T)
    Endpoint("gain_profile", "a", "primary", "time", "profile", 0.90, "t_boot", "profile", "0.10-0.90",
             minimum_effect=math.log(1.2)),
    Endpoint("paper_0.99", "a", "secondary", "time", "paper", 0.99, "hull", "paper", "0.99"),
    Endpoint("isotonic_0.99", "a", "secondary", "time", "isotonic", 0.99, "hull", "isotonic", "0.99"),
    Endpoint("paper_1.00", "a", "secondary", "time", "paper", 1.00, "hull", "paper", "1.00"),
    Endpoint("gain_0.50", "a", "secondary", "time", "gain", 0.50, "t_boot", "gain", "0.50"),
    Endpoint("fixed", "a", "secondary", "time", "fixed", 1.0, "hull", "fixed", "fixed"),
    Endpoint("logrank", "a", "secondary", "logrank", "isotonic", 0.99, "logrank", "logrank", "0.99"),
    Endpoint("mean_accuracy", "b", "primary", "seed", "mean_accuracy", interval="paired_t",
             target_rule="equal_time", target="mean", minimum_effect=0.01),
    Endpoint("accuracy_at_T", "b", "secondary", "seed", "accuracy_at_T", target_rule="equal_time", target="end"),
    Endpoint("accuracy_at_half", "b", "secondary", "seed", "accuracy_at_half", target_rule="equal_time",
             target="half"),
    Endpoint("last_quarter", "b", "secondary", "seed", "last_quarter", target_rule="equal_time",
             target="last_quarter"),
):
    ENDPOINTS.add(_e.name, _e)
PRIMARY = {q: next(e for e in ENDPOINTS._entries.values() if e.question == q and e.role == "primary")
           for q in QUESTIONS}
# what the calibration harness simulates by default: both primaries and the headline secondaries
CALIBRATED = ["gain_profile", "isotonic_0.99", "paper_0.99", "mean_accuracy", "accuracy_at_T", "last_quarter"]


class Arm(NamedTuple):
    """One arm of a comparison on the comparison's time grid.

    curves: [seeds, grid] accuracy. steps: [seeds, grid] optimiser steps done by each grid time
    (interpolated from the evaluations' `step` and `train_time_s`), for the decomposition; NaN
    where unknown (the authors' runs carry no step counts).
    """

    curves: np.ndarray
    steps: np.ndarray


def _steps_at(t: np.ndarray, steps: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Each seed's step count at time when[r], interpolated on the grid: [R, seeds]."""
    when = np.asarray(when, dtype=float)
    j = np.clip(np.searchsorted(t, when), 1, len(t) - 1)
    w = np.clip((when - t[j - 1]) / (t[j] - t[j - 1]), 0, 1)
    out = steps[:, j - 1].T * (1 - w)[:, None] + steps[:, j].T * w[:, None]
    return np.where(np.isfinite(when)[:, None], out, np.nan)


def _resamples(rng: np.random.Generator, k: int, n_boot: int) -> np.ndarray:
    return rng.integers(0, k, (n_boot, k))


def _time_endpoint(e: Endpoint, t, base: Arm, meth: Arm, picks, fixed, paired: bool = False,
                   cost_noise: np.ndarray | None = None) -> dict:
    rule = stats.TIME_RULES[e.rule]
    t_max = float(t[-1])
    y_b, y_m = base.curves.mean(axis=0, keepdims=True), meth.curves.mean(axis=0, keepdims=True)
    point = rule(t, y_b, y_m, e.fraction, fixed)
    value, flag = stats.speedups(point, t_max)
    pb, pm = picks
    boot_b, boot_m = base.curves[pb].mean(axis=1), meth.curves[pm].mean(axis=1)
    reps = rule(t, boot_b, boot_m, e.fraction, fixed)
    rep_value, rep_flag = stats.speedups(reps, t_max)
    if cost_noise is not None:  # the cost clock: each resample also redraws the measured cost ratio
        rep_value = rep_value * cost_noise
    k = min(len(base.curves), len(meth.curves))
    log_est = stats.safe_log(value)
    log_reps = stats.safe_log(rep_value)
    # one seed's (pair's) SD of the log speedup, from the resamples' spread: planning input only
    with stats.undefined_is_nan():
        unit_sd = float(np.nanstd(log_reps, ddof=1) * math.sqrt(k) * math.sqrt(k / (k - 1))) if k > 1 else math.nan
    interval = stats.BOOTSTRAP_INTERVALS[e.interval](stats.safe_log(rep_value)[None, :], log_est, k, paired)
    lo, hi, p = (float(np.exp(interval.low[0])), float(np.exp(interval.high[0])), float(interval.p_value[0]))
    if not np.isfinite(log_est[0]):
        lo = hi = p = math.nan
    record = {
        "target_accuracy": float(point.target[0]), "t_baseline_s": float(point.t_baseline[0]),
        "t_method_s": float(point.t_method[0]), "estimate": float(value[0]), "speedup": float(value[0]),
        "censored": {-1: "method not reached: upper bound", 1: "baseline not reached: lower bound",
                     0: ""}[int(flag[0])] if np.isfinite(value[0]) else "",
        "censored_frac": float(np.mean(rep_flag != 0)), "ci_low": lo, "ci_high": hi, "p_value": p,
        "reached_frac": float(np.mean(np.isfinite(reps.t_method))), "unit_sd": unit_sd,
    }
    # the decomposition, from the logged steps: speedup = step efficiency / step-cost ratio
    if np.isfinite(base.steps).all() and np.isfinite(meth.steps).all() and flag[0] == 0 and np.isfinite(value[0]):
        s_b = _steps_at(t, base.steps, point.t_baseline)[0].mean()
        s_m = _steps_at(t, meth.steps, point.t_method)[0].mean()
        steps_b = np.take_along_axis(_steps_at(t, base.steps, reps.t_baseline), pb, axis=1).mean(axis=1)
        steps_m = np.take_along_axis(_steps_at(t, meth.steps, reps.t_method), pm, axis=1).mean(axis=1)
        ok = (rep_flag == 0) & np.isfinite(rep_value)
        with np.errstate(divide="ignore", invalid="ignore"):
            eff_reps = np.where(ok, steps_b / steps_m, np.nan)
            cost_reps = np.where(ok, (reps.t_method / steps_m) / (reps.t_baseline / steps_b), np.nan)
            if cost_noise is not None:
                cost_reps = cost_reps / cost_noise
        eff = s_b / s_m
        cost = (point.t_method[0] / s_m) / (point.t_baseline[0] / s_b)
        record.update(steps_baseline=float(s_b), steps_method=float(s_m), step_efficiency=float(eff),
                      step_cost_ratio=float(cost))
        for name, est, reps_ in (("step_efficiency", eff, eff_reps), ("step_cost_ratio", cost, cost_reps)):
            finite = reps_[np.isfinite(reps_)]
            if len(finite) and np.all(finite == finite[0]):  # a factor every resample agrees on (no decision
                lo_hi = (float(finite[0]),) * 2                 # rests on it): known exactly, not undefined
            else:
                band = stats.expanded(stats.safe_log(finite)[None, :], np.log([est]), k, paired)
                lo_hi = (float(np.exp(band.low[0])), float(np.exp(band.high[0])))
            record[f"{name}_ci_low"], record[f"{name}_ci_high"] = lo_hi
    return record


def _seed_endpoint(e: Endpoint, t, base: Arm, meth: Arm, paired: bool = False) -> dict:
    statistic = stats.SEED_STATISTICS[e.rule]
    v_b, v_m = statistic(t, base.curves), statistic(t, meth.curves)
    test = "paired_t" if paired else "welch"
    diff, interval = stats.SEED_TESTS[test](v_b, v_m)
    k = min(len(v_b), len(v_m))
    unit_sd = (float(np.std(v_m - v_b, ddof=1)) if paired else
               float(np.sqrt((np.var(v_b, ddof=1) + np.var(v_m, ddof=1)) / 2))) if k > 1 else math.nan
    return {"interval_method": test, "unit_sd": unit_sd, "estimate": float(diff), "accuracy_diff": float(diff),
            "accuracy_baseline": float(v_b.mean()),
            "accuracy_method": float(v_m.mean()), "ci_low": float(interval.low), "ci_high": float(interval.high),
            "p_value": float(interval.p_value)}


def per_seed_times(t: np.ndarray, curves: np.ndarray, target: float) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's time to `target` on its own monotone fit, and whether it got there by T."""
    times = stats.crossing_times(t, stats.isotonic_fits(curves), np.full(len(curves), target))
    return np.where(np.isnan(times), t[-1], times), ~np.isnan(times)


def logrank(t: np.ndarray, base: Arm, meth: Arm, target: float) -> dict:
    """Kaplan-Meier view of the per-seed times to target, censored at T, and scipy's log-rank test.
    The estimate is the ratio of the arms' restricted mean times to target (baseline / method)."""
    from scipy.stats import CensoredData
    from scipy.stats import logrank as scipy_logrank

    tb, eb = per_seed_times(t, base.curves, target)
    tm, em = per_seed_times(t, meth.curves, target)
    record = {"target_accuracy": target, "estimate": float(tb.mean() / tm.mean()),
              "reached_frac": float(em.mean()), "ci_low": math.nan, "ci_high": math.nan}
    if not (eb.any() or em.any()):
        return {**record, "p_value": math.nan}
    x = CensoredData(uncensored=tm[em], right=tm[~em])
    y = CensoredData(uncensored=tb[eb], right=tb[~eb])
    result = scipy_logrank(x, y)
    # scipy's statistic is positive when x (the method) reaches the target sooner than expected
    record.update(p_value=float(result.pvalue), logrank_z=float(result.statistic))
    return record


def compare(t: np.ndarray, base: Arm, meth: Arm, endpoints=None, n_boot: int = 2000, seed: int = 0,
            fixed_target: float | None = None, paired: bool = False, cost_log_se: float = 0.0) -> list[dict]:
    """One record per endpoint: estimate, 95% interval, p-value and unadjusted decision; for time
    endpoints the target, both times, the censoring and the decomposition into step efficiency
    and step cost; the plateau flag on every record. The same resamples serve every endpoint.

    paired: row i of both arms is the same seed (common random numbers, docs/verdict.md): the
    bootstrap resamples seeds jointly (one draw of seed indices serves both arms) and per-seed
    endpoints use the paired t; otherwise the arms are resampled independently and Welch's t.
    cost_log_se: on the cost clock, the standard error of the log step-cost ratio (from the two
    arms' `pods cost` errors); every resample of a speedup is multiplied by a draw of it, so the
    interval carries the cost measurement's error beside the seeds'."""
    t = np.asarray(t, dtype=float)
    endpoints = [ENDPOINTS[n] if isinstance(n, str) else n for n in (endpoints or ENDPOINTS.names())]
    rng = np.random.default_rng(seed)
    if paired:
        if len(base.curves) != len(meth.curves):
            raise ValueError(f"paired arms need one run per seed in each, got {len(base.curves)} and "
                             f"{len(meth.curves)}")
        joint = _resamples(rng, len(base.curves), n_boot)
        picks = (joint, joint)
    else:
        picks = (_resamples(rng, len(base.curves), n_boot), _resamples(rng, len(meth.curves), n_boot))
    cost_noise = np.exp(rng.normal(0.0, cost_log_se, n_boot)) if cost_log_se > 0 else None
    rising = bool(stats.rising_at_end(t, base.curves.mean(axis=0))[0])
    records, isotonic_target = [], None
    for e in endpoints:
        if e.rule == "fixed" and fixed_target is None:
            continue
        record = {"endpoint": e.name, "question": e.question, "role": e.role, "interval_method": e.interval,
                  "pairing": "seed" if paired else "none",
                  "target_rule": e.target_rule, "target": f"{fixed_target:.3f}" if e.rule == "fixed" else e.target,
                  "plateau": "no peak within T" if rising else "peak within T"}
        if e.kind == "time":
            record.update(_time_endpoint(e, t, base, meth, picks, fixed_target, paired, cost_noise))
            if e.name == "isotonic_0.99":
                isotonic_target = record["target_accuracy"]
        elif e.kind == "seed":
            record.update(_seed_endpoint(e, t, base, meth, paired))
        else:
            target = fixed_target if fixed_target is not None else isotonic_target
            if target is None or not math.isfinite(target):
                continue
            record.update(logrank(t, base, meth, target))
        above, below = e.words
        if e.kind == "logrank":
            p = record["p_value"]
            record["verdict"] = "undecided" if not (p < stats.ALPHA) else (above if record["logrank_z"] > 0 else below)
        else:
            record["verdict"] = str(stats.decide(record["ci_low"], record["ci_high"], e.null, above, below))
        records.append(record)
    return records


ARM_KEYS = ("benchmark", "hardware", "baseline", "method")
# What a comparison's curves are aligned by (pods.study.curves.AXES); rows without one are on time.
DEFAULT_AXIS = "time"
# the axes that are wall clocks (the paper's claim is about them): the measured training clock and
# the cost clock (step x measured seconds per step); `step` is sample efficiency
CLOCKS = ("time", "cost")


def _family(row: dict) -> tuple[str, str]:
    """A primary row's family: its question on its axis. The training-time comparisons answer the
    paper's claim; the same pairs aligned by optimiser steps ask another question (sample
    efficiency) and are adjusted among themselves, never diluting the wall-clock family."""
    return row["question"], row.get("axis") or DEFAULT_AXIS


def family_size(rows: list[dict], question: str, axis: str = DEFAULT_AXIS) -> int:
    """Distinct comparisons in a (question, axis) primary family: the same two arms listed under
    two names (an ablation repeating the main pair) are one hypothesis, not two."""
    return len({tuple(r.get(k) for k in ARM_KEYS) for r in rows
                if r["role"] == "primary" and _family(r) == (question, axis)})


def adjust_family(rows: list[dict], method: str = MULTIPLICITY) -> list[dict]:
    """Adjusted p-values and decisions over each family's primary endpoints of a study (one
    family per question and axis, each distinct pair of arms once); secondary rows keep their
    raw p-value and get no adjusted decision."""
    adjust = stats.ADJUSTMENTS[method]
    families: dict[tuple[str, str], dict[tuple, list[dict]]] = {}
    for r in rows:
        if r["role"] == "primary":
            families.setdefault(_family(r), {}).setdefault(tuple(r.get(k) for k in ARM_KEYS), []).append(r)
    for family in families.values():
        first = [members[0] for members in family.values()]
        p = np.array([r["p_value"] if r["p_value"] is not None and math.isfinite(r["p_value"]) else 1.0 for r in first])
        for members, q in zip(family.values(), adjust(p)):
            for r in members:
                e = ENDPOINTS[r["endpoint"]]
                above, below = e.words
                r["p_adjusted"] = float(q)
                r["multiplicity"] = f"{method} over {len(family)}"
                r["verdict_adjusted"] = ("undecided" if q >= stats.ALPHA
                                         else above if r["estimate"] > e.null else below)
    return rows


def speedup_profile(t: np.ndarray, base: Arm, meth: Arm, levels: int = 20, n_boot: int = 1000,
                    seed: int = 0) -> list[dict]:
    """The speedup at every accuracy level between the base model and the baseline's final level,
    so the answer does not hang on one target: for each level, the time each arm's monotone fit
    (of its mean curve) first reaches it, their ratio, and a pointwise 95% band (the `hull` of
    bootstrap resamples of seeds, as the primary endpoint). Levels the method never reaches
    within T have a time of NaN and no ratio."""
    t = np.asarray(t, dtype=float)
    f_b = stats.isotonic_fits(base.curves.mean(axis=0))
    f_m = stats.isotonic_fits(meth.curves.mean(axis=0))
    if f_b[-1] <= f_b[0]:
        return []
    grid = np.linspace(f_b[0], f_b[-1], levels + 1)[1:]
    rng = np.random.default_rng(seed)
    pb, pm = _resamples(rng, len(base.curves), n_boot), _resamples(rng, len(meth.curves), n_boot)
    boot_b = stats.isotonic_fits(base.curves[pb].mean(axis=1))
    boot_m = stats.isotonic_fits(meth.curves[pm].mean(axis=1))
    k = min(len(base.curves), len(meth.curves))
    rows = []
    for level in grid:
        tb = stats.crossing_times(t, f_b[None, :], np.array([level]))[0]
        tm = stats.crossing_times(t, f_m[None, :], np.array([level]))[0]
        rep_b = stats.crossing_times(t, boot_b, np.full(n_boot, level))
        rep_m = stats.crossing_times(t, boot_m, np.full(n_boot, level))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = tb / tm if np.isfinite(tm) and tm > 0 else math.nan
            log_reps = stats.safe_log(np.where(np.isnan(rep_m), rep_b / t[-1], rep_b / rep_m))
        lo = hi = math.nan
        if math.isfinite(ratio) and np.isfinite(log_reps).sum() > 10:
            band = stats.hull(log_reps[np.isfinite(log_reps)][None, :], np.log([ratio]), k)
            lo, hi = float(np.exp(band.low[0])), float(np.exp(band.high[0]))
        rows.append({"level": float(level), "t_baseline_s": float(tb), "t_method_s": float(tm),
                     "speedup": float(ratio), "ci_low": lo, "ci_high": hi})
    return rows


def survival_curves(t: np.ndarray, base: Arm, meth: Arm, target: float) -> dict:
    """Kaplan-Meier estimates (scipy.stats.ecdf on right-censored data) of the fraction of seeds
    that have reached `target` by each time, per arm: {"baseline"|"method": (times, fraction)}."""
    from scipy.stats import CensoredData, ecdf

    out = {}
    for name, arm in (("baseline", base), ("method", meth)):
        times, reached = per_seed_times(t, arm.curves, target)
        if not reached.any():
            out[name] = (np.array([0.0, t[-1]]), np.array([0.0, 0.0]))
            continue
        sf = ecdf(CensoredData(uncensored=times[reached], right=times[~reached])).sf
        out[name] = (np.concatenate([[0.0], sf.quantiles, [t[-1]]]),
                     np.concatenate([[0.0], 1 - sf.probabilities, [1 - sf.probabilities[-1]]]))
    return out
