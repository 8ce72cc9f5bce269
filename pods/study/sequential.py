"""Group-sequential confirmation: seeds added in batches until the primaries decide or a cap.

A confirmation looks at its primaries after each batch of fresh seed pairs (K looks at
information fractions t_1 < ... < t_K = 1, the share of the capped seed count analysed so far).
Each side of each two-sided test spends alpha = 2.5% over the looks by the Lan-DeMets spending
function of O'Brien-Fleming type,

    alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))        (one-sided alpha at t = 1)

so early looks need overwhelming evidence and the last one almost the fixed-sample level. The
boundary c_k of look k solves  P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) -
alpha(t_{k-1}) under no difference, where the look statistics are Brownian motion at the
information fractions: corr(Z_i, Z_j) = sqrt(t_i / t_j) (Jennison & Turnbull 2000, ch. 7).

Written by hand: no maintained Python library computes spending boundaries (R's gsDesign and
rpact do; the `gsdesign` package on PyPI has only the numerical integration). The joint normal
probabilities are scipy's (`scipy.stats.multivariate_normal.cdf`, Genz's algorithm), and
`tests/study/test_sequential.py` checks the boundaries against gsDesign's published values.

A look's statistic for a t test on k pairs is turned into the normal scale through its p-value
(z = Phi^-1(1 - p_one_sided)), the usual way to use normal boundaries with few degrees of freedom;
the harness (`simulate_sequential`) shows the error rate that results at our seed counts.

Several primaries in a fixed sequence (a hierarchy): at every look, the first undecided hypothesis
is tested against its boundary; once it is decided the next one is tested at the same look, each
with its own full-alpha boundary. Tamhane, Mehta & Liu (2010, Biometrics 66:1174) show that this
controls the family-wise error when every hypothesis has an alpha-level group-sequential boundary.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

from pods.registry import Registry

SIDE_ALPHA = 0.025   # each side of every two-sided primary (5% two-sided)

SPENDING: Registry = Registry("alpha-spending function")


@SPENDING.register("obrien_fleming")
def obrien_fleming(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming type: almost nothing spent early, nearly all of alpha at t = 1."""
    t = np.asarray(t, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(t > 0, 2 - 2 * sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / np.sqrt(t)), 0.0)


@SPENDING.register("pocock")
def pocock(t: np.ndarray, alpha: float) -> np.ndarray:
    """Lan-DeMets Pocock type: alpha log(1 + (e - 1) t), spent evenly on the log scale."""
    return alpha * np.log(1 + (math.e - 1) * np.asarray(t, dtype=float))


def _p_below(bounds: Sequence[float], cov: np.ndarray) -> float:
    """P(Z_i < c_i for every i) for a standard normal vector with covariance `cov`."""
    if len(bounds) == 1:
        return float(sps.norm.cdf(bounds[0]))
    # Genz's quasi-Monte Carlo integration, seeded so that a boundary is the same number every time
    return float(sps.multivariate_normal.cdf(np.asarray(bounds), mean=np.zeros(len(bounds)), cov=cov, abseps=1e-7,
                                             releps=1e-7, maxpts=200_000 * len(bounds), rng=np.random.default_rng(0)))


def boundaries(fractions: Sequence[float], alpha: float = SIDE_ALPHA, spending: str = "obrien_fleming") -> np.ndarray:
    """Upper critical values c_1..c_K (normal scale) of a one-sided alpha-level group-sequential
    test with looks at `fractions` (increasing, the last one 1). The lower side of a two-sided test
    is the mirror image (-c_k), each side spending its own alpha."""
    t = np.asarray(fractions, dtype=float)
    if t.ndim != 1 or not len(t) or np.any(np.diff(t) <= 0) or t[0] <= 0 or abs(t[-1] - 1) > 1e-12:
        raise ValueError(f"information fractions must increase to 1, got {list(fractions)}")
    spent = SPENDING[spending](t, alpha)
    cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    bounds: list[float] = []
    for k in range(len(t)):
        increment = spent[k] - (spent[k - 1] if k else 0.0)
        before = _p_below(bounds, cov[:k, :k]) if k else 1.0

        def excess(c: float) -> float:   # P(no earlier crossing, crossing now) - increment
            return before - _p_below(bounds + [c], cov[:k + 1, :k + 1]) - increment

        bounds.append(float(optimize.brentq(excess, 0.0, 12.0, xtol=1e-6)) if increment > 1e-15 else math.inf)
    return np.array(bounds)


class Boundaries(NamedTuple):
    """Upper critical values of each look (normal scale) and their Monte-Carlo standard errors."""

    bounds: np.ndarray
    se: np.ndarray


def null_t_paths(batch: int, looks: int, sims: int, seed: int = 0, chunk: int = 2_000_000) -> np.ndarray:
    """[sims, looks] paired-t statistics of null paths (mean-zero normal differences) on the normal
    scale (`z_from_t`), after 1..looks batches of `batch` pairs. Drawn from sufficient statistics:
    a batch of b normal differences adds a N(0, b) sum and a chi-square(b - 1) sum of squares about
    its own mean, two draws per batch instead of b; the t statistic does not depend on the SD."""
    ks = batch * np.arange(1, looks + 1)
    out = np.empty((sims, looks), dtype=np.float32)
    rng = np.random.default_rng(seed)
    for start in range(0, sims, chunk):
        n = min(chunk, sims - start)
        sums = rng.standard_normal((n, looks)) * math.sqrt(batch)
        within = rng.chisquare(batch - 1, (n, looks))
        total, squares = np.cumsum(sums, axis=1), np.cumsum(within + sums ** 2 / batch, axis=1)
        sd = np.sqrt(np.maximum(squares - total ** 2 / ks, 1e-300) / (ks - 1))
        out[start:start + n] = z_from_t((total / ks) / (sd / np.sqrt(ks)), ks - 1)
    return out


def t_boundaries(batch: int, looks: int, alpha: float = SIDE_ALPHA, spending: str = "obrien_fleming",
                 sims: int = 4_000_000, seed: int = 0, paths: np.ndarray | None = None) -> Boundaries:
    """The spending function's boundaries for paired t statistics on `batch` new pairs per look
    (normal scale, `z_from_t`), with their Monte-Carlo standard errors.

    With a few pairs the normal boundaries let slightly more than alpha through (the SD is
    re-estimated at every look). The first look's statistic alone is exactly standard normal on
    that scale (z_from_t of a t statistic under the null), so its boundary is the normal quantile
    of what it spends, exactly. Later looks are read off `sims` simulated null paths
    (`null_t_paths`, or `paths` already drawn): look k's boundary is the value that the share of
    paths spent at k exceeds among the paths no earlier boundary stopped. Its standard error is
    half the distance between the order statistics one binomial SD of the exceedance count on
    either side (the quantile's Monte-Carlo error); `pods confirm` prints it."""
    if batch < 2 or looks < 1:
        raise ValueError(f"a confirmation needs batches of >= 2 pairs and >= 1 look, got {batch} and {looks}")
    ks = batch * np.arange(1, looks + 1)
    spent = SPENDING[spending](ks / ks[-1], alpha)
    z = paths if paths is not None else (null_t_paths(batch, looks, sims, seed) if looks > 1 else None)
    total = len(z) if z is not None else 0
    alive = np.ones(total, dtype=bool)
    bounds, errors = [], []
    for k in range(looks):
        increment = spent[k] - (spent[k - 1] if k else 0.0)
        if k == 0:
            c, se = float(sps.norm.isf(increment)) if increment > 0 else math.inf, 0.0
        else:
            count = increment * total
            if count < 1:
                c, se = math.inf, math.nan
            else:
                values = np.sort(z[alive, k])[::-1]
                j, spread = int(round(count)), max(math.sqrt(count), 1.0)
                lo, hi = max(int(round(count - spread)), 1), min(int(round(count + spread)), len(values))
                c, se = float(values[j - 1]), float(values[lo - 1] - values[hi - 1]) / 2
        bounds.append(c)
        errors.append(se)
        if z is not None:
            alive &= z[:, k] < c
    return Boundaries(np.array(bounds), np.array(errors))


def z_from_t(statistic: np.ndarray, df: np.ndarray) -> np.ndarray:
    """A t statistic on `df` degrees of freedom on the normal scale, through its one-sided p-value
    (sign kept): the value a normal boundary is compared with."""
    statistic, df = np.asarray(statistic, dtype=float), np.asarray(df, dtype=float)
    return np.sign(statistic) * sps.norm.isf(sps.t.sf(np.abs(statistic), df))


class Outcome(NamedTuple):
    """The outcome of a confirmation: per hypothesis the look (1-based) that decided it (0: none),
    the direction (+1 above, -1 below, 0 undecided), and the last look analysed."""

    look: np.ndarray
    direction: np.ndarray
    stopped_at: int


def level_boundaries(batch: int, looks: int, hypotheses: int, alpha: float = SIDE_ALPHA,
                     spending: str = "obrien_fleming", sims: int = 4_000_000, seed: int = 0) -> dict[int, Boundaries]:
    """The t boundaries at alpha / j for j = 1..hypotheses (the levels a Holm-type procedure passes
    through as hypotheses are decided), all read off one set of simulated null paths."""
    paths = null_t_paths(batch, looks, sims, seed) if looks > 1 else None
    return {j: t_boundaries(batch, looks, alpha / j, spending, paths=paths) for j in range(1, hypotheses + 1)}


PROCEDURES: Registry = Registry("multiple-testing procedure of a confirmation")


@PROCEDURES.register("fixed_sequence")
def hierarchical(z: np.ndarray, bounds: Mapping[int, np.ndarray] | np.ndarray) -> Outcome:
    """Walk a fixed sequence of hypotheses through the looks: z [looks, hypotheses] (NaN for looks
    not yet run), bounds [looks] (the same alpha-level boundary for every hypothesis; or the
    `level_boundaries` mapping, of which it uses the full level, 1). At each look the first
    undecided hypothesis is tested; a decision (|z| >= c, either side) passes the test to the next
    one at the same look. Sampling stops at the look where the last one is decided."""
    bounds = np.asarray(bounds[1] if isinstance(bounds, Mapping) else bounds, dtype=float)
    z = np.atleast_2d(np.asarray(z, dtype=float))
    looks, hyps = z.shape
    look, direction = np.zeros(hyps, dtype=int), np.zeros(hyps, dtype=int)
    current, stopped = 0, 0
    for k in range(looks):
        if not np.isfinite(z[k]).any():
            break
        stopped = k + 1
        while current < hyps and np.isfinite(z[k, current]) and abs(z[k, current]) >= bounds[k]:
            look[current], direction[current] = k + 1, int(np.sign(z[k, current]))
            current += 1
        if current == hyps:
            break
    return Outcome(look, direction, stopped)


@PROCEDURES.register("holm")
def holm_sequential(z: np.ndarray, bounds: Mapping[int, np.ndarray]) -> Outcome:
    """Holm's procedure inside group-sequential boundaries (the graphical approach of Maurer &
    Bretz 2013 with equal weights): each of the j hypotheses still undecided is tested at look k
    against its group-sequential boundary at level alpha / j (`bounds[j][k]`, `level_boundaries`);
    a decision passes its share of alpha to the others, which are tested again at the same look
    at the higher level. Ties in order do not matter: the largest |z| is tried first. Testing
    only the current look rejects a subset of what the closed test over the whole sequence
    rejects, so the family-wise error stays at alpha per side."""
    z = np.atleast_2d(np.asarray(z, dtype=float))
    looks, hyps = z.shape
    look, direction = np.zeros(hyps, dtype=int), np.zeros(hyps, dtype=int)
    open_, stopped = list(range(hyps)), 0
    for k in range(looks):
        if not np.isfinite(z[k]).any():
            break
        stopped = k + 1
        while open_:
            c = float(np.asarray(bounds[len(open_)])[k])
            h = max(open_, key=lambda i: abs(z[k, i]) if np.isfinite(z[k, i]) else -1.0)
            if not (np.isfinite(z[k, h]) and abs(z[k, h]) >= c):
                break
            look[h], direction[h] = k + 1, int(np.sign(z[k, h]))
            open_.remove(h)
        if not open_:
            break
    return Outcome(look, direction, stopped)


def simulate_sequential(effects: Sequence[float], sd: Sequence[float], batch: int, looks: int, studies: int = 4000,
                        correlation: float = 0.0, spending: str = "obrien_fleming", seed: int = 0,
                        procedure: str = "fixed_sequence", bounds: Mapping[int, Boundaries] | None = None,
                        sims: int = 1_000_000) -> dict:
    """Error rates and power of a confirmation with paired t tests at each look, its hypotheses
    walked by `procedure` (PROCEDURES; in the order given, for the fixed sequence).

    Each hypothesis h is a paired comparison whose per-pair differences are normal with mean
    effects[h] and SD sd[h]; the hypotheses' differences of one pair correlate by `correlation` (the
    arms of a seed serve several comparisons). `batch` pairs arrive per look, `looks` looks. Returns,
    per hypothesis, the rate of decisions above and below (a false decision wherever the effect is
    0), the mean number of pairs at the stop, and the family-wise rate of any false decision.
    `bounds`: level_boundaries already computed (else computed with `sims` null paths)."""
    rng = np.random.default_rng(seed)
    effects, sd = np.asarray(effects, float), np.asarray(sd, float)
    hyps = len(effects)
    if bounds is None:
        bounds = level_boundaries(batch, looks, hyps, SIDE_ALPHA, spending, sims=sims, seed=seed + 1)
    levels = {j: b.bounds for j, b in bounds.items()}
    cov = correlation * np.ones((hyps, hyps)) + (1 - correlation) * np.eye(hyps)
    draws = rng.multivariate_normal(np.zeros(hyps), cov, size=(studies, batch * looks)) * sd + effects
    ks = batch * np.arange(1, looks + 1)
    z = np.empty((studies, looks, hyps))
    for j, k in enumerate(ks):
        x = draws[:, :k]
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(k))
        z[:, j] = z_from_t(t, k - 1)
    walk = PROCEDURES[procedure]
    outcomes = [walk(z[s], levels) for s in range(studies)]
    direction = np.array([o.direction for o in outcomes])
    null = effects == 0
    false = (direction != 0) & null[None, :] | (direction * np.sign(effects)[None, :] < 0)
    wrong_side = lambda side: float((((direction == side) & (np.sign(effects)[None, :] != side))  # noqa: E731
                                     .any(axis=1)).mean())
    return {
        "bounds": levels[1], "decide_up": (direction > 0).mean(axis=0), "decide_down": (direction < 0).mean(axis=0),
        "familywise_false": float(false.any(axis=1).mean()),
        "familywise_false_up": wrong_side(1), "familywise_false_down": wrong_side(-1),
        "pairs_at_stop": float(np.mean([ks[o.stopped_at - 1] for o in outcomes])),
    }
