"""The statistics behind the verdict: small pure functions on arrays, and registries of them.

Everything here works on many curves at once (a leading batch axis), because the same code
serves one analysis, its bootstrap resamples and the calibration harness's thousands of
simulated studies (`pods.study.calibration`). docs/verdict.md says which rule and which interval each
endpoint uses and why; this module only defines them.

Written by hand, since no library has them in batched form: the isotonic fit (scipy's
`isotonic_regression` takes one curve at a time; `tests/study/test_stats.py` checks the batched one
against it), interpolated crossing times, and the expanded-percentile / t bootstrap intervals.
The Welch interval, the distributions and the log-rank test come from scipy.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
from scipy import stats as sps

from pods.registry import Registry

LEVEL = 0.95      # every interval is a 95% interval; every test two-sided at 5%
ALPHA = 1 - LEVEL


# --------------------------------------------------------------------------------------------
# Curves: monotone fits and the time a curve first reaches a level
# --------------------------------------------------------------------------------------------
def isotonic_fits(y: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Least-squares non-decreasing fit of every curve in `y` [..., G] (no NaN).

    Uses the max-min formula fit_i = max_{j <= i} min_{k >= i} mean(y_j..y_k), which is exact for
    equal weights and vectorises over curves (O(G^2) memory per curve; G is a few dozen here).
    """
    y = np.asarray(y, dtype=float)
    shape, g = y.shape, y.shape[-1]
    flat = y.reshape(-1, g)
    out = np.empty_like(flat)
    lengths = np.arange(g)[None, :] - np.arange(g)[:, None] + 1.0          # [j, k] = k - j + 1
    below = np.arange(g)[:, None] > np.arange(g)[None, :]                  # [j, i]: j > i
    for start in range(0, len(flat), chunk):
        part = flat[start:start + chunk]
        c = np.concatenate([np.zeros((len(part), 1)), np.cumsum(part, axis=1)], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            avg = (c[:, None, 1:] - c[:, :g, None]) / lengths             # [r, j, k] = mean(y_j..y_k)
        suffix_min = np.minimum.accumulate(avg[..., ::-1], axis=-1)[..., ::-1]  # [r, j, i] = min_{k >= i}
        suffix_min[:, below] = -np.inf
        out[start:start + chunk] = suffix_min.max(axis=1)
    return out.reshape(shape)


def crossing_times(t: np.ndarray, f: np.ndarray, target: np.ndarray) -> np.ndarray:
    """First time each curve f [R, G] reaches target [R], interpolating linearly between grid
    points; NaN where it never does within the grid."""
    f = np.atleast_2d(np.asarray(f, dtype=float))
    target = np.broadcast_to(np.asarray(target, dtype=float), (len(f),))
    hit = f >= target[:, None]
    reached = hit.any(axis=1) & np.isfinite(target)
    j = np.argmax(hit, axis=1)
    prev = np.maximum(j - 1, 0)
    rows = np.arange(len(f))
    f0, f1 = f[rows, prev], f[rows, j]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(f1 > f0, (target - f0) / (f1 - f0), 0.0)
    times = np.where(j == 0, t[0], t[prev] + frac * (t[j] - t[prev]))
    return np.where(reached, times, np.nan)


def first_grid_time(t: np.ndarray, y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """First grid time after t = 0 at which each curve y [R, G] is at or above target [R]
    (the paper's rule: no interpolation; t = 0 is the shared base model, never a finish line)."""
    y = np.atleast_2d(np.asarray(y, dtype=float))
    hit = (y >= np.asarray(target, dtype=float)[:, None]) & (t > 0)[None, :]
    j = np.argmax(hit, axis=1)
    return np.where(hit.any(axis=1), t[j], np.nan)


def rising_at_end(t: np.ndarray, y: np.ndarray, tolerance: float = 0.99) -> np.ndarray:
    """The plateau check: True where the monotone fit of y [R, G] at 3/4 of the budget is below
    `tolerance` x its value at the end, i.e. the curve still rises over the last quarter and its
    "peak" is only its level at T."""
    fit = isotonic_fits(np.atleast_2d(y))
    q = int(np.argmin(np.abs(t - 0.75 * t[-1])))
    return fit[:, q] < tolerance * fit[:, -1]


# --------------------------------------------------------------------------------------------
# Time-to-target rules: (t, baseline curves [R, G], method curves [R, G], fraction, fixed level)
# -> (target [R], t_baseline [R], t_method [R]); NaN time = not reached within the grid
# --------------------------------------------------------------------------------------------
class Times(NamedTuple):
    target: np.ndarray
    t_baseline: np.ndarray
    t_method: np.ndarray


@dataclass(frozen=True)
class TimeRule:
    """A time-to-target rule, registered once with everything that shows it: a new rule is one
    `@time_rule(...)` function; tables, the verdict and figures read the rest from here."""

    function: Callable[[np.ndarray, np.ndarray, np.ndarray, float, "float | None"], Times]
    #: (line style, marker) of its target line and crossings in a study's main figure; None: not drawn
    style: tuple[str, str] | None = None
    #: it reads each arm's monotone (isotonic) fit, which the figure draws beside the target
    monotone_fits: bool = False
    #: a row of the decomposition and projection tables (speedup = step efficiency / step cost)
    decomposed: bool = False
    #: the rule a figure that shows one rule shows (the decomposition's; the verdict's endpoints
    #: and their roles are pods.study.verdict.ENDPOINTS)
    figure: bool = False

    def __call__(self, t, y_base, y_method, fraction, fixed=None) -> Times:
        return self.function(t, y_base, y_method, fraction, fixed)


TIME_RULES: Registry[TimeRule] = Registry("time-to-target rule")


def time_rule(name: str, **shown):
    """Register `function(t, y_base, y_method, fraction, fixed)` as the time rule `name`."""
    def register(function):
        TIME_RULES.add(name, TimeRule(function, **shown))
        return function
    return register


@time_rule("paper", style=("--", "v"), decomposed=True)
def paper_rule(t, y_base, y_method, fraction, fixed=None) -> Times:
    """The paper's rule: `fraction` x the baseline mean curve's highest evaluation after t = 0;
    each arm's first evaluation at or above it."""
    later = t > 0
    target = fraction * np.max(y_base[:, later], axis=1)
    return Times(target, first_grid_time(t, y_base, target), first_grid_time(t, y_method, target))


def anchored_fits(t: np.ndarray, y_base: np.ndarray, y_method: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                      np.ndarray]:
    """The curves every fit-based time rule reads its crossings off: (start [R], f_base, f_method [R, G]).

    Both arms start from the same base model, so at t = 0 they have one accuracy, the start: the
    mean of the two arms' t = 0 evaluations (the same number when the arms are paired by seed).
    Each arm's curve is the start at t = 0, then the monotone (isotonic) fit of its evaluations
    after t = 0. Declared rule for a level a curve reaches at or before its first evaluation
    (docs/verdict.md, "Levels at t = 0"): every level above the start is crossed strictly after
    t = 0, interpolated linearly from (0, start) to the first fitted point at or above it, so a
    crossing time is never 0 and a speedup never infinite; a level the curve never reaches
    within the grid is censored at the budget, as before. Fitting t = 0 together with the later
    evaluations (the rule before) pooled the shared start into the first evaluations whenever they
    fell below it, and a resample whose other arm then started above a level crossed it at t = 0.
    A grid that does not start at 0 has no shared start: plain monotone fits."""
    y_base, y_method = np.atleast_2d(y_base), np.atleast_2d(y_method)
    if t[0] != 0:
        f_b, f_m = isotonic_fits(y_base), isotonic_fits(y_method)
        return f_b[:, 0], f_b, f_m
    later = t > 0
    start = 0.5 * (y_base[:, 0] + y_method[:, 0])
    fit = lambda y: np.concatenate([start[:, None], isotonic_fits(y[:, later])], axis=1)  # noqa: E731
    return start, fit(y_base), fit(y_method)


@time_rule("isotonic", style=(":", "D"), monotone_fits=True, decomposed=True, figure=True)
def isotonic_rule(t, y_base, y_method, fraction, fixed=None) -> Times:
    """The robust rule: both mean curves fitted under monotonicity (`anchored_fits`); target =
    `fraction` x the highest level BOTH fits reach (the baseline's peak whenever the method gets
    there; the method's own peak when it ends lower), crossings interpolated. Taking the lower of
    the two maxima makes the rule symmetric: with two identical arms the speedup is centred on 1,
    where the baseline's own (noisy, upward-biased) maximum alone made "slower" twice as likely."""
    start, f_b, f_m = anchored_fits(t, y_base, y_method)
    later = t > 0
    target = fraction * np.minimum(f_b[:, later].max(axis=1), f_m[:, later].max(axis=1))
    target = np.where(target > start, target, np.nan)  # no gain over the base model: no target
    return Times(target, crossing_times(t, f_b, target), crossing_times(t, f_m, target))


@time_rule("gain", monotone_fits=True)
def gain_rule(t, y_base, y_method, fraction, fixed=None) -> Times:
    """A share of the gain over the base model: target = start + `fraction` x (the highest level
    BOTH monotone fits reach - start), crossings interpolated (`anchored_fits`). At `fraction` 0.5
    both arms cross where their curves still rise steeply, so the crossing times are well
    conditioned even when neither curve levels off within the budget (time to a peak divides the
    evaluation noise by a slope near zero there)."""
    start, f_b, f_m = anchored_fits(t, y_base, y_method)
    later = t > 0
    top = np.minimum(f_b[:, later].max(axis=1), f_m[:, later].max(axis=1))
    target = start + fraction * (top - start)
    target = np.where(top > start, target, np.nan)  # no gain over the base model: no target
    return Times(target, crossing_times(t, f_b, target), crossing_times(t, f_m, target))


PROFILE_LEVELS = 9   # levels of the gain profile, evenly spaced from (1 - fraction) to fraction of the gain


@time_rule("profile", monotone_fits=True)
def profile_rule(t, y_base, y_method, fraction, fixed=None) -> Times:
    """The speedup across the gain, not at one point of it: at PROFILE_LEVELS levels evenly spaced
    from (1 - `fraction`) to `fraction` of the gain both monotone fits reach (the `gain` rule's
    targets), each arm's crossing time; the times returned are their geometric means, so that
    t_baseline / t_method is the geometric-mean speedup over the levels. Leaving out the top of the
    gain keeps every crossing where the curves still rise (well conditioned, docs/verdict.md); the
    bottom, where a crossing is one evaluation's noise above the base model. Both fits reach every
    level by construction: never censored. `target` is the middle level."""
    start, f_b, f_m = anchored_fits(t, y_base, y_method)   # once for the nine levels
    later = t > 0
    top = np.minimum(f_b[:, later].max(axis=1), f_m[:, later].max(axis=1))
    gain = np.where(top > start, top - start, np.nan)  # no gain over the base model: no target
    targets = [start + f * gain for f in np.linspace(1 - fraction, fraction, PROFILE_LEVELS)]
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = [np.exp(np.mean(np.log([crossing_times(t, f, target) for target in targets]), axis=0))
               for f in (f_b, f_m)]
    return Times(targets[PROFILE_LEVELS // 2], geo[0], geo[1])


@time_rule("fixed", monotone_fits=True)
def fixed_rule(t, y_base, y_method, fraction, fixed=None) -> Times:
    """A quality target set in advance per benchmark (MLPerf's time-to-train): the time each
    arm's monotone fit (`anchored_fits`) reaches `fixed`; no target at or below the start."""
    if fixed is None:
        raise ValueError("the fixed rule needs a target accuracy (the study's target_accuracy)")
    start, f_b, f_m = anchored_fits(t, y_base, y_method)
    target = np.where(float(fixed) > start, float(fixed), np.nan)
    return Times(target, crossing_times(t, f_b, target), crossing_times(t, f_m, target))


FIGURE_RULE = next(name for name, rule in TIME_RULES.items() if rule.figure)
# the (rule, target) rows of the decomposition and projection tables
DECOMPOSED = tuple((name, "0.99") for name, rule in TIME_RULES.items() if rule.decomposed)


def speedups(times: Times, t_max: float) -> tuple[np.ndarray, np.ndarray]:
    """t_baseline / t_method, and a censoring flag: -1 where the method never reached the target
    (the value is then an upper bound, t_baseline / T), +1 where only the baseline missed it (a
    lower bound, T / t_method), 0 where both were measured; NaN where neither reached it."""
    tb, tm = times.t_baseline, times.t_method
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(np.isnan(tm), tb / t_max, np.where(np.isnan(tb), t_max / tm, tb / tm))
    flag = np.where(np.isnan(tm) & ~np.isnan(tb), -1, np.where(np.isnan(tb) & ~np.isnan(tm), 1, 0))
    value = np.where(np.isnan(tb) & np.isnan(tm), np.nan, value)
    return value, flag


# --------------------------------------------------------------------------------------------
# Per-seed statistics: a curve [.., G] -> one number per seed (compared by Welch's t)
# --------------------------------------------------------------------------------------------
SEED_STATISTICS: Registry = Registry("per-seed statistic")


@SEED_STATISTICS.register("mean_accuracy")
def mean_accuracy(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean accuracy over the budget: the area under the curve from 0 to T divided by T."""
    return np.trapezoid(y, t, axis=-1) / (t[-1] - t[0])


@SEED_STATISTICS.register("accuracy_at_T")
def accuracy_at_end(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y[..., -1]


@SEED_STATISTICS.register("accuracy_at_half")
def accuracy_at_half(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    return y[..., int(np.argmin(np.abs(t - t[-1] / 2)))]


@SEED_STATISTICS.register("last_quarter")
def last_quarter(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean of the evaluations in the last quarter of the budget."""
    return y[..., t >= 0.75 * t[-1]].mean(axis=-1)


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------
class Interval(NamedTuple):
    low: np.ndarray
    high: np.ndarray
    p_value: np.ndarray   # two-sided, against no effect (0 on the scale the interval is on)


def _expansion(k: np.ndarray | int, paired: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Hesterberg's expanded percentile: the small-sample correction sqrt(k / (k - 1)) of the
    bootstrap's variance and the t quantile on 2k - 2 degrees of freedom (two arms of k seeds), or
    k - 1 when the arms are paired by seed (k pairs resampled together, as a paired t counts them).
    One seed has no spread to resample: NaN, and the intervals below are then empty with p = 1."""
    k = np.asarray(k, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = k - 1 if paired else 2 * k - 2
        return np.where(k >= 2, np.sqrt(k / (k - 1)), np.nan), np.where(k >= 2, df, np.nan)


def _undecided(estimate: np.ndarray) -> Interval:
    nan = np.full(np.shape(estimate), np.nan)
    return Interval(nan, nan.copy(), np.ones(np.shape(estimate)))


@contextlib.contextmanager
def undefined_is_nan():
    """numpy warns when a row of resamples or seeds has no finite value to reduce (an all-NaN slice,
    a mean of nothing, no degrees of freedom left); such a row is undefined here, which the NaN it
    gives already says (and `_defined` turns into no interval), so the warning is noise."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(invalid="ignore", divide="ignore"):
            yield


def _quiet(interval_function):
    @functools.wraps(interval_function)
    def wrapped(*args, **kwargs):
        with undefined_is_nan():
            return interval_function(*args, **kwargs)
    return wrapped


def _defined(interval: Interval) -> Interval:
    """An interval is a decision only where both its ends are finite and it has width: a zero or
    undefined spread of the resamples (every resample equal, too few of them, an infinite one)
    says nothing about the difference, so it gives no interval and p = 1, never a decision."""
    low, high = np.asarray(interval.low, dtype=float), np.asarray(interval.high, dtype=float)
    ok = np.isfinite(low) & np.isfinite(high) & (high > low)
    nan = np.full(np.shape(low), np.nan)
    return Interval(np.where(ok, low, nan), np.where(ok, high, nan),
                    np.where(ok, np.nan_to_num(np.asarray(interval.p_value, dtype=float), nan=1.0), 1.0))


@_quiet
def percentile(replicates: np.ndarray, estimate: np.ndarray, k, paired: bool = False) -> Interval:
    """The plain per-seed percentile bootstrap (undercovers at a few seeds: kept as a reference)."""
    lo, hi = np.nanquantile(replicates, [ALPHA / 2, 1 - ALPHA / 2], axis=-1)
    below = np.mean(replicates <= 0, axis=-1)
    p = np.clip(2 * np.minimum(below, 1 - below), 1 / (replicates.shape[-1] + 1), 1)
    return _defined(Interval(lo, hi, p))


@_quiet
def expanded(replicates: np.ndarray, estimate: np.ndarray, k: int, paired: bool = False) -> Interval:
    """The expanded percentile bootstrap: percentile quantiles at Phi(-sqrt(k/(k-1)) t_{0.975, df})."""
    scale, df = _expansion(k, paired)
    if not np.isfinite(scale) or replicates.shape[-1] == 0:  # no resample to read a quantile off
        return _undecided(estimate)
    tail = float(sps.norm.cdf(-scale * sps.t.ppf(1 - ALPHA / 2, df)))
    lo, hi = np.nanquantile(replicates, [tail, 1 - tail], axis=-1)
    # p: the level at which an end of the interval touches 0 (the quantile map above, inverted).
    # Where fewer than 10 resamples lie beyond 0 their count says little, and a p-value floored at
    # 1/B could never pass a Holm-adjusted level; the tail is then read off a normal fit to them.
    n = np.sum(np.isfinite(replicates), axis=-1)
    count = np.minimum(np.sum(replicates <= 0, axis=-1), np.sum(replicates >= 0, axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        normal = sps.norm.cdf(-np.abs(np.nanmean(replicates, axis=-1)) / np.nanstd(replicates, axis=-1, ddof=1))
    side = np.where(count >= 10, count / np.maximum(n, 1), np.nan_to_num(normal, nan=0.5))
    side = np.clip(side, 1e-12, 0.5)
    p = 2 * sps.t.sf(-sps.norm.ppf(side) / scale, df)
    return _defined(Interval(lo, hi, np.minimum(p, 1.0)))


@_quiet
def t_boot(replicates: np.ndarray, estimate: np.ndarray, k, paired: bool = False) -> Interval:
    """A t interval around the estimate with the bootstrap SD x sqrt(k/(k-1)) on 2k - 2 df (k - 1 paired)."""
    scale, df = _expansion(k, paired)
    if not np.all(np.isfinite(scale)):
        return _undecided(estimate)
    with np.errstate(invalid="ignore"):
        se = np.nanstd(replicates, axis=-1, ddof=1) * scale
    q = sps.t.ppf(1 - ALPHA / 2, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * sps.t.sf(np.abs(estimate) / se, df)
    return _defined(Interval(estimate - q * se, estimate + q * se, p))


def hull(replicates: np.ndarray, estimate: np.ndarray, k, paired: bool = False) -> Interval:
    """The union of `expanded` and `t_boot`: it decides only when both decide (p the larger)."""
    a, b = expanded(replicates, estimate, k, paired), t_boot(replicates, estimate, k, paired)
    return Interval(np.minimum(a.low, b.low), np.maximum(a.high, b.high), np.maximum(a.p_value, b.p_value))


BOOTSTRAP_INTERVALS: Registry = Registry("bootstrap interval")
for _name, _fn in (("percentile", percentile), ("expanded", expanded), ("t_boot", t_boot), ("hull", hull)):
    BOOTSTRAP_INTERVALS.add(_name, _fn)


def welch(base: np.ndarray, method: np.ndarray) -> tuple[np.ndarray, Interval]:
    """Difference of means (method - baseline) of per-seed values [..., k] with Welch's interval."""
    result = sps.ttest_ind(method, base, axis=-1, equal_var=False)
    ci = result.confidence_interval(LEVEL)
    diff = np.mean(method, axis=-1) - np.mean(base, axis=-1)
    return diff, Interval(np.asarray(ci.low), np.asarray(ci.high), np.nan_to_num(np.asarray(result.pvalue), nan=1.0))


def paired_t(base: np.ndarray, method: np.ndarray) -> tuple[np.ndarray, Interval]:
    """Mean of the per-seed differences (method - baseline) of paired values [..., k] (seed i of
    one arm with seed i of the other) with the paired t interval: the arms of a seed share their
    training split, prompt order and test set, so their difference varies less than either arm."""
    result = sps.ttest_rel(method, base, axis=-1)
    ci = result.confidence_interval(LEVEL)
    diff = np.mean(method - base, axis=-1)
    return diff, Interval(np.asarray(ci.low), np.asarray(ci.high), np.nan_to_num(np.asarray(result.pvalue), nan=1.0))


SEED_TESTS = {"welch": welch, "paired_t": paired_t}   # per-seed endpoints: unpaired arms, paired arms


def decide(low, high, null: float, above: str, below: str):
    """`above` when the whole interval lies above `null`, `below` when below it, else undecided."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    whole = np.isfinite(low) & np.isfinite(high)  # an interval with an undefined end decides nothing
    return np.where(whole & (low > null), above, np.where(whole & (high < null), below, "undecided"))


# --------------------------------------------------------------------------------------------
# Multiplicity
# --------------------------------------------------------------------------------------------
ADJUSTMENTS: Registry = Registry("multiplicity adjustment")


@ADJUSTMENTS.register("holm")
def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error rate)."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    m = len(p)
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


@ADJUSTMENTS.register("benjamini_hochberg")
def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), scipy's implementation."""
    return sps.false_discovery_control(np.asarray(p, dtype=float), method="bh")


def quantiles(x: np.ndarray, q) -> np.ndarray:
    """NaN-aware quantiles along the last axis (NaN where a row has no finite value)."""
    with np.errstate(all="ignore"):
        finite = np.isfinite(x).any(axis=-1)
        out = np.nanquantile(np.where(np.isfinite(x), x, np.nan), q, axis=-1) if finite.any() else \
            np.full((len(np.atleast_1d(q)),) + x.shape[:-1], np.nan)
    return out


def safe_log(x) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, dtype=float))


def fmt_p(p: float) -> str:
    return "" if p is None or not math.isfinite(p) else (f"{p:.2g}" if p >= 0.001 else "< 0.001")
