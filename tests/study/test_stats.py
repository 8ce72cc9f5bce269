"""The verdict's statistics (pods.study.stats, pods.study.verdict) and the calibration harness (pods.study.calibration):
against scipy, hand-computed values, and simulations with a known answer."""
import math

import numpy as np
import pytest
from scipy import stats as sps
from scipy.optimize import isotonic_regression

from pods.study import calibration, stats, verdict

T = np.array([0.0, 1, 2, 3, 4])


def test_batched_isotonic_fit_equals_scipys_one_curve_at_a_time():
    rng = np.random.default_rng(0)
    y = np.round(rng.normal(size=(300, 17)).cumsum(axis=1) * 0.1 + rng.normal(size=(300, 17)), 1)  # ties too
    np.testing.assert_allclose(stats.isotonic_fits(y), [isotonic_regression(v).x for v in y], atol=1e-12)
    np.testing.assert_allclose(stats.isotonic_fits(y.reshape(3, 100, 17)).reshape(300, 17), stats.isotonic_fits(y))


def test_crossing_times_interpolate_and_report_never_as_nan():
    f = np.array([[0.1, 0.3, 0.5, 0.7, 0.8], [0.1, 0.2, 0.3, 0.3, 0.3]])
    np.testing.assert_allclose(stats.crossing_times(T, f, np.array([0.792, 0.792])), [3.92, np.nan])
    assert stats.first_grid_time(T, f[:1], np.array([0.792]))[0] == 4.0  # the paper's rule rounds up to the grid


def test_isotonic_rule_targets_the_level_both_reach_and_is_symmetric_for_identical_arms():
    base, meth = np.array([[0.1, 0.3, 0.5, 0.7, 0.8]]), np.array([[0.1, 0.5, 0.8, 0.8, 0.8]])
    times = stats.isotonic_rule(T, base, meth, 0.99)
    assert times.target[0] == pytest.approx(0.792)
    assert times.t_baseline[0] == pytest.approx(3.92) and times.t_method[0] == pytest.approx(1 + 0.292 / 0.3)
    # the method ends lower: the target is the level it reaches, so both times are measured
    low = stats.isotonic_rule(T, base, np.array([[0.1, 0.2, 0.3, 0.3, 0.3]]), 0.99)
    assert low.target[0] == pytest.approx(0.297) and np.isfinite(low.t_method[0])
    same = stats.isotonic_rule(T, base, base, 0.99)
    assert same.t_baseline[0] == same.t_method[0]
    # no gain over the shared start (both arms start from the same base model): no target
    flat = stats.isotonic_rule(T, np.array([[0.5, 0.5, 0.49, 0.5, 0.5]]), np.array([[0.5, 0.5, 0.5, 0.49, 0.5]]), 0.99)
    assert np.isnan(flat.target[0])


def test_speedups_flag_censored_values_as_bounds():
    times = stats.Times(np.array([0.5] * 3), np.array([2.0, 2.0, np.nan]), np.array([1.0, np.nan, 1.0]))
    value, flag = stats.speedups(times, t_max=4.0)
    np.testing.assert_allclose(value, [2.0, 0.5, 4.0])
    assert flag.tolist() == [0, -1, 1]


def test_plateau_flag():
    assert stats.rising_at_end(T, np.array([0.1, 0.3, 0.5, 0.7, 0.8]))[0]
    assert not stats.rising_at_end(T, np.array([0.1, 0.7, 0.8, 0.8, 0.8]))[0]


def test_expanded_interval_uses_hesterbergs_quantile_and_t_boot_its_sd():
    rng = np.random.default_rng(1)
    reps = rng.normal(0.2, 0.1, (1, 20000))
    k = 4
    tail = sps.norm.cdf(-math.sqrt(k / (k - 1)) * sps.t.ppf(0.975, 2 * k - 2))
    assert tail == pytest.approx(0.0024, abs=1e-4)   # far out from 0.025: the small-sample widening
    e = stats.expanded(reps, np.array([0.2]), k)
    assert e.low[0] == pytest.approx(np.quantile(reps, tail)) and e.high[0] == pytest.approx(np.quantile(reps,
                                                                                                         1 - tail))
    p = stats.percentile(reps, np.array([0.2]), k)
    assert e.low[0] < p.low[0] and e.high[0] > p.high[0]
    tb = stats.t_boot(reps, np.array([0.2]), k)
    half = sps.t.ppf(0.975, 6) * reps.std(ddof=1) * math.sqrt(4 / 3)
    assert tb.low[0] == pytest.approx(0.2 - half) and tb.high[0] == pytest.approx(0.2 + half)
    h = stats.hull(reps, np.array([0.2]), k)
    assert h.low[0] == min(e.low[0], tb.low[0]) and h.p_value[0] == max(e.p_value[0], tb.p_value[0])
    # p < 0.05 exactly when the interval excludes 0 (up to the resampling's granularity)
    for mean in (0.05, 0.2, 0.3):
        r = rng.normal(mean, 0.1, (1, 20000))
        for method in (stats.expanded, stats.t_boot):
            iv = method(r, np.array([mean]), k)
            assert (iv.p_value[0] < 0.05) == (iv.low[0] > 0), (method.__name__, mean)


def test_resamples_that_leave_no_spread_to_read_are_undecided_not_decided():
    """No statistics function turns an undefined or zero spread into a decision: an infinite
    resample makes the bootstrap SD (t_boot) and the upper quantile (expanded) undefined; every
    resample equal gives a spread of exactly 0; a set of resamples with none finite says nothing.
    Each is no interval, p = 1; and `decide` reads an interval with an undefined end as undecided."""
    reps = np.array([[0.1, 0.3, np.inf, 0.2]])
    for method in (stats.t_boot, stats.expanded, stats.hull, stats.percentile):
        iv = method(reps, np.array([0.2]), 4, paired=True)
        assert iv.p_value[0] == 1.0 and np.isnan(iv.low[0]) and np.isnan(iv.high[0]), method.__name__
    for method in (stats.expanded, stats.t_boot, stats.hull):
        iv = method(np.empty((1, 0)), np.array([0.2]), 4, paired=True)
        assert iv.p_value[0] == 1.0 and np.isnan(iv.low[0]), method.__name__
    for method in (stats.t_boot, stats.expanded, stats.hull, stats.percentile):  # a spread of exactly 0
        iv = method(np.full((1, 5), 0.2), np.array([0.2]), 4)
        assert iv.p_value[0] == 1.0 and np.isnan(iv.low[0]), method.__name__
    assert stats.t_boot(np.zeros((1, 5)), np.array([0.0]), 4).p_value[0] == 1.0
    assert stats.decide(0.16, np.nan, 0.0, "faster", "slower") == "undecided"
    assert stats.decide(np.nan, -0.1, 0.0, "faster", "slower") == "undecided"
    assert stats.decide(0.16, 0.5, 0.0, "faster", "slower") == "faster"


def test_a_level_at_the_first_evaluation_is_crossed_after_t_0_from_the_shared_start():
    """The declared rule (docs/verdict.md, "Levels at t = 0"): both arms start at the same accuracy;
    every level above it is crossed strictly after t = 0, interpolated from (0, start), whatever the
    first evaluations do; the old fit of t = 0 with the rest could cross at t = 0 (an infinite speedup)."""
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    base = np.array([[0.30, 0.20, 0.34, 0.40, 0.42]])    # dips below the start first: the old fit sank at t = 0
    meth = np.array([[0.30, 0.38, 0.40, 0.44, 0.46]])
    start, f_b, f_m = stats.anchored_fits(t, base, meth)
    assert start[0] == 0.30 and f_b[0, 0] == f_m[0, 0] == 0.30
    np.testing.assert_allclose(f_b[0, 1:], isotonic_regression(base[0, 1:]).x)
    old_b = stats.isotonic_fits(base)
    assert old_b[0, 0] < 0.30   # what made the lowest levels of the method's fit lie above them at t = 0
    times = stats.profile_rule(t, base, meth, 0.9)
    assert np.isfinite(times.t_baseline[0]) and np.isfinite(times.t_method[0]) and times.t_method[0] > 0
    # brute force: the lowest level of the profile, by hand from the anchored curves
    level = 0.30 + 0.1 * (min(f_b[0, 1:].max(), f_m[0, 1:].max()) - 0.30)
    j = int(np.argmax(f_m[0] >= level))
    expected = t[j - 1] + (level - f_m[0, j - 1]) / (f_m[0, j] - f_m[0, j - 1]) * (t[j] - t[j - 1])
    assert stats.gain_rule(t, base, meth, 0.1).t_method[0] == pytest.approx(expected)
    assert 0 < expected < t[1]
    # every fit-based rule crosses after 0; no gain over the start: no target
    for name, fraction in (("profile", 0.9), ("gain", 0.5), ("isotonic", 0.99)):
        out = stats.TIME_RULES[name](t, base, meth, fraction)
        assert out.t_baseline[0] > 0 and out.t_method[0] > 0, name
    assert np.isnan(stats.gain_rule(t, np.full((1, 5), 0.3), np.array([[0.3, 0.2, 0.25, 0.3, 0.29]]), 0.5).target[0])
    assert np.isnan(stats.fixed_rule(t, base, meth, 1.0, fixed=0.25).target[0])
    assert stats.fixed_rule(t, base, meth, 1.0, fixed=0.39).t_method[0] == pytest.approx(1 + 0.01 / 0.02)


def test_the_gain_profile_has_an_interval_when_resamples_start_above_a_level():
    """The case that left the default study's arith_hard equal_update and the earlier confirmation's look 4
    without an interval: seeds whose method curves start at the shared base and jump, baselines that dip
    first. With the declared rule every resample's speedup is finite and t_boot gives an interval."""
    rng = np.random.default_rng(3)
    t = np.linspace(0, 160, 12)
    curve = lambda top, rate: 0.3 + (top - 0.3) * (1 - np.exp(-t / rate))  # noqa: E731
    base = np.clip(curve(0.36, 60) + rng.normal(0, 0.012, (6, 12)) * (t > 0), 0, 1)
    base[:, 1] -= 0.03                                       # the baseline's first evaluation dips
    meth = np.clip(curve(0.37, 10) + rng.normal(0, 0.012, (6, 12)) * (t > 0), 0, 1)
    steps = np.full_like(base, np.nan)
    record = verdict.compare(t, verdict.Arm(base, steps), verdict.Arm(meth, steps), endpoints=["gain_profile"],
                             n_boot=400, paired=True)[0]
    assert np.isfinite(record["ci_low"]) and np.isfinite(record["ci_high"]) and record["ci_low"] < record["ci_high"]
    assert record["p_value"] < 1


def test_welch_is_method_minus_baseline_with_scipys_interval():
    base, meth = np.array([0.1, 0.2, 0.15, 0.12]), np.array([0.3, 0.25, 0.2, 0.35])
    diff, iv = stats.welch(base, meth)
    ref = sps.ttest_ind(meth, base, equal_var=False)
    assert diff == pytest.approx(meth.mean() - base.mean()) and iv.p_value == pytest.approx(ref.pvalue)
    assert (iv.low, iv.high) == pytest.approx(tuple(ref.confidence_interval(0.95)))


def test_holm_and_benjamini_hochberg():
    # the four Welch p-values of the earlier committed summary, Holm-adjusted
    np.testing.assert_allclose(stats.holm(np.array([0.036, 0.36, 0.045, 0.118])), [0.144, 0.36, 0.144, 0.236])
    np.testing.assert_allclose(stats.benjamini_hochberg(np.array([0.01, 0.04, 0.03, 0.5])),
                               [0.04, 0.0533333, 0.0533333, 0.5], rtol=1e-5)


def _arm(matrix, steps=None):
    matrix = np.asarray(matrix, dtype=float)
    return verdict.Arm(matrix, np.full_like(matrix, np.nan) if steps is None else np.asarray(steps, dtype=float))


def _noisy(rng, mean, k=8, sd=0.03):
    return np.clip(np.asarray(mean) + rng.normal(0, sd, (k, len(mean))), 0, 1)


def test_compare_is_reproducible_decides_a_clear_case_and_decomposes_from_the_logged_steps():
    rng = np.random.default_rng(5)
    base = _noisy(rng, [0.1, 0.4, 0.6, 0.75, 0.8])
    meth = _noisy(rng, [0.1, 0.7, 0.8, 0.82, 0.83])
    # the baseline does 2 steps per second, the method 1: steps logged at each grid time
    steps_b, steps_m = np.tile(T * 2, (8, 1)), np.tile(T * 1, (8, 1))
    one = verdict.compare(T, _arm(base, steps_b), _arm(meth, steps_m), n_boot=400, seed=3)
    assert one == verdict.compare(T, _arm(base, steps_b), _arm(meth, steps_m), n_boot=400, seed=3)
    rows = {r["endpoint"]: r for r in one}
    assert set(rows) == {"gain_profile", "isotonic_0.99", "paper_0.99", "paper_1.00", "gain_0.50", "logrank",
                         "mean_accuracy", "accuracy_at_T", "accuracy_at_half", "last_quarter"}   # `fixed`: a target
    for r in one:
        if math.isfinite(r["ci_low"]):
            assert r["ci_low"] <= r["estimate"] <= r["ci_high"], r["endpoint"]
    robust = rows["isotonic_0.99"]
    assert robust["verdict"] == "faster" and robust["role"] == "secondary" and robust["question"] == "a"
    assert rows["gain_profile"]["verdict"] == "faster" and rows["gain_profile"]["role"] == "primary"
    assert robust["steps_baseline"] == pytest.approx(2 * robust["t_baseline_s"])
    assert robust["steps_method"] == pytest.approx(robust["t_method_s"])
    assert robust["step_cost_ratio"] == pytest.approx(2.0)
    assert robust["speedup"] == pytest.approx(robust["step_efficiency"] / robust["step_cost_ratio"])
    assert rows["mean_accuracy"]["verdict"] == "higher"
    assert rows["mean_accuracy"]["estimate"] == pytest.approx(
        (np.trapezoid(meth, T, axis=1) - np.trapezoid(base, T, axis=1)).mean() / 4)
    assert rows["logrank"]["verdict"] == "faster" and rows["logrank"]["p_value"] < 0.05
    fixed = verdict.compare(T, _arm(base), _arm(meth), n_boot=200, fixed_target=0.7)
    f = next(r for r in fixed if r["endpoint"] == "fixed")
    assert f["target_accuracy"] == 0.7 and f["t_method_s"] < f["t_baseline_s"]


def test_compare_reports_a_method_that_never_gets_there_as_an_upper_bound():
    base = np.array([[0.1, 0.3, 0.5, 0.7, 0.8]] * 4)
    never = np.array([[0.1, 0.2, 0.3, 0.3, 0.3]] * 4)
    rows = {r["endpoint"]: r for r in verdict.compare(T, _arm(base), _arm(never), n_boot=50)}
    paper = rows["paper_0.99"]
    assert np.isnan(paper["t_method_s"]) and paper["censored"].startswith("method not reached")
    assert paper["speedup"] == pytest.approx(4.0 / 4.0)  # t_baseline / T: an upper bound
    assert rows["isotonic_0.99"]["plateau"] == "no peak within T"


def test_adjust_family_is_holm_within_each_question_over_distinct_primary_rows_only():
    def row(endpoint, question, role, p, estimate, method):
        return {"endpoint": endpoint, "question": question, "role": role, "p_value": p, "estimate": estimate,
                "benchmark": "arith", "hardware": "cpu", "baseline": "grpo-n16-m16", "method": method}

    rows = [row("isotonic_0.99", "a", "primary", p, 1.5, m) for p, m in ((0.01, "pods-a"), (0.04, "pods-b"))]
    rows += [row("mean_accuracy", "b", "primary", p, -0.02, m) for p, m in ((0.001, "pods-a"), (0.2, "pods-b"))]
    rows += [row("paper_0.99", "a", "secondary", 0.001, 2.0, "pods-a")]
    rows += [row("isotonic_0.99", "a", "primary", 0.04, 1.5, "pods-b")]  # the same pair again: one hypothesis
    verdict.adjust_family(rows)
    assert [r.get("p_adjusted") for r in rows] == pytest.approx([0.02, 0.04, 0.002, 0.2, None, 0.04], nan_ok=True)
    assert [r.get("verdict_adjusted") for r in rows] == ["faster", "faster", "lower", "undecided", None, "faster"]
    assert rows[0]["multiplicity"] == "holm over 2"
    # the same pairs aligned by optimiser steps are a family of their own, on each question
    steps = [{**row("isotonic_0.99", "a", "primary", p, 1.5, m), "axis": "step"} for p, m in ((0.01, "pods-a"),)]
    verdict.adjust_family(rows + steps)
    assert steps[0]["p_adjusted"] == pytest.approx(0.01) and steps[0]["multiplicity"] == "holm over 1"
    assert rows[0]["p_adjusted"] == pytest.approx(0.02)


# --------------------------------------------------------------------------------------------
# The calibration harness
# --------------------------------------------------------------------------------------------
GRID = np.linspace(0, 240, 17)


def synthetic_population(effect: float, seeds: int = 6, seed: int = 0, kappa: float = 0.0) -> dict:
    """Saturating curves with a per-seed shift and AR-like noise; the method learns `effect` x faster.
    kappa > 0: seed i of both arms shares that share of its shift (paired by seed, as our runs are)."""
    rng = np.random.default_rng(seed)
    mean_b = 0.3 + 0.25 * (1 - np.exp(-GRID / 120))
    mean_m = 0.3 + 0.25 * (1 - np.exp(-effect * GRID / 120))
    shared = rng.normal(0, 0.015, (seeds, 1))
    noise = lambda: (math.sqrt(kappa) * shared + math.sqrt(1 - kappa) * rng.normal(0, 0.015, (seeds, 1))  # noqa: E731
                     + rng.normal(0, 0.012, (seeds, len(GRID))))
    base, meth = mean_b + noise(), mean_m + noise()
    base[:, 0] = meth[:, 0] = 0.3
    return {"label": f"synthetic x{effect}", "t": GRID, "base": base, "meth": meth, "paired": kappa > 0}


STUDIES = 600
# an exact test decides wrongly 2.5% of the time per side on average, so a simulated rate is held
# to 2.5% plus two Monte-Carlo standard errors (docs/verdict.md states the bounds the same way)
FALSE_BOUND = 0.025 + 2 * math.sqrt(0.025 * 0.975 / STUDIES)
COVER_LOW = 0.93 - 2 * math.sqrt(0.95 * 0.05 / STUDIES)


@pytest.fixture(scope="module")
def calibrated():
    """The declared primaries on a small synthetic paired population (arms correlated by seed)."""
    table = calibration.calibrate([synthetic_population(1.6, seeds=8, seed=1, kappa=0.6)], seeds=(4, 10),
                                  studies=STUDIES,
                                  boot=200, seed=11, endpoints=["gain_profile", "mean_accuracy"], progress=False)
    table.attrs["studies"] = STUDIES
    return table


@pytest.fixture(scope="module")
def unpaired():
    return calibration.calibrate([synthetic_population(1.6)], seeds=(4,), studies=STUDIES, boot=200, seed=12,
                                 endpoints=["mean_accuracy"], progress=False)


def _cell(table, scenario, endpoint, method, k):
    hit = table[(table.scenario == scenario) & (table.endpoint == endpoint) & (table.interval_method == method)
                & (table.seeds == k)]
    assert len(hit) == 1
    return hit.iloc[0]


@pytest.mark.parametrize("k", [4, 10])
def test_primary_endpoints_cover_and_keep_false_decisions_under_2_5_percent(calibrated, k):
    assert set(calibrated["pairing"]) == {"seed"} and calibrated["kappa"].iloc[0] > 0.2
    for endpoint in ("gain_profile", "mean_accuracy"):
        method = verdict.ENDPOINTS[endpoint].interval
        fitted, null = (_cell(calibrated, s, endpoint, method, k) for s in ("fitted", "identical"))
        assert fitted["coverage"] >= COVER_LOW and null["coverage"] >= COVER_LOW, (endpoint, k)
        assert null["decide_up"] <= FALSE_BOUND and null["decide_down"] <= FALSE_BOUND, (endpoint, k)
        assert fitted["power"] > 0.05  # it does decide sometimes


def test_the_declared_rule_picks_a_calibrated_interval_and_the_most_powerful_one(calibrated):
    chosen, summary = calibration.choose_interval(calibrated, "gain_profile", 4)
    assert chosen in set(summary.loc[summary["meets_rule"] | (summary["coverage_min"] >= COVER_LOW), "interval_method"])
    # the plain percentile undercovers at 4 seeds: the rule never takes it
    assert not summary.set_index("interval_method").loc["percentile", "meets_rule"]
    ok = summary[summary["interval_method"] == chosen].iloc[0]
    assert ok["coverage_min"] >= COVER_LOW and ok["false_side_max"] <= FALSE_BOUND
    others = summary[(summary["coverage_min"] >= COVER_LOW) & (summary["false_side_max"] <= FALSE_BOUND)
                     & (summary["meets_rule"] == ok["meets_rule"])]
    assert ok["power_median"] == others["power_median"].max()


def test_pairing_by_seed_buys_power_when_the_arms_correlate():
    paired = synthetic_population(1.3, seeds=8, seed=3, kappa=0.8)
    table = calibration.calibrate([paired, {**paired, "label": "unpaired", "paired": False}], seeds=(4,),
                                  studies=400, boot=50, seed=5, endpoints=["mean_accuracy"], progress=False)
    fitted = table[table["scenario"] == "fitted"].set_index("interval_method")
    assert fitted.loc["paired_t", "power"] > fitted.loc["welch", "power"] + 0.1
    # and the pairing the harness fits is the one the population has (shared shift 0.8 of the seed SD)
    assert calibration.fit_pairing([(GRID, paired["base"], paired["meth"])]) > 0.3


def test_the_harness_reproduces_the_known_undercoverage_of_the_plain_percentile_bootstrap(unpaired):
    calibrated = unpaired
    # the percentile bootstrap of a difference of two means of k = 4 normal values is about the
    # t interval with 1.96 sqrt(3/4) in place of t_{0.975, 6}: coverage P(|t_6| < 1.697) = 0.86
    known = 2 * sps.t.cdf(1.96 * math.sqrt(3 / 4), 6) - 1
    assert known == pytest.approx(0.86, abs=0.005)
    cell = _cell(calibrated, "identical", "mean_accuracy", "percentile", 4)
    assert abs(cell["coverage"] - known) < 0.05
    assert _cell(calibrated, "identical", "mean_accuracy", "welch", 4)["coverage"] > cell["coverage"] + 0.04


def test_calibration_is_deterministic_given_its_seed_and_its_table_renders():
    comp = synthetic_population(1.3, seeds=4)
    a = calibration.calibrate([comp], seeds=(3,), studies=20, boot=30, seed=2, progress=False)
    b = calibration.calibrate([comp], seeds=(3,), studies=20, boot=30, seed=2, progress=False)
    assert a.equals(b)
    md = calibration.calibration_markdown(a)
    assert "| synthetic x1.3 | isotonic_0.99 | hull | 3 |" in md


def test_population_model_recovers_shift_and_ar1_correlation():
    rng = np.random.default_rng(4)
    model = calibration.ArmModel(GRID, np.full(17, 0.5), np.full(17, 0.02), rho=0.4, phi=0.6)
    sims = model.simulate(rng, 1, 400)[0]
    rho, phi = calibration.fit_correlation([sims - sims.mean(axis=0)])
    assert rho == pytest.approx(0.4, abs=0.1) and phi == pytest.approx(0.6, abs=0.15)


def test_apriori_seed_counts_match_the_textbook_values():
    # paired t, d = 0.5 and 0.8, two-sided 5%, 80% power: 34 and 15 pairs; two-sample d = 0.5: 64 per group
    assert calibration.seeds_for_power(1.0, 0.5) == 34 and calibration.seeds_for_power(1.0, 0.8) == 15
    assert calibration.seeds_for_power(2.0, -1.0) == 34          # only |effect| / sd matters
    assert calibration.seeds_for_power(1.0, 0.5, paired=False) == 64
    assert calibration.seeds_for_power(0.0, 0.5) == math.inf and calibration.seeds_for_power(1.0, 1e-4) == math.inf
    # the upper 80% bound of an SD from 3 degrees of freedom: sd * sqrt(3 / chi2_0.2(3))
    assert calibration.sd_upper(1.0, 3) == pytest.approx(math.sqrt(3 / sps.chi2.ppf(0.2, 3)))
    assert calibration.sd_upper(1.0, 3) > calibration.sd_upper(1.0, 30) > 1.0


def test_the_predictive_check_flags_a_model_that_underestimates_new_seeds():
    right = synthetic_population(1.3, seeds=12, seed=7)
    z = calibration.predictive_check(GRID, right["base"])
    assert 0.6 < calibration.predictive_summary(z)["rms_z"] < 1.5
    # seeds that differ by far more than their evaluations' noise (machine speed between executions)
    spread = right["base"] + np.random.default_rng(8).normal(0, 0.06, (12, 1)) * (GRID > 0)
    wide = calibration.predictive_summary(calibration.predictive_check(GRID, spread[::2]))
    assert calibration.predictive_summary(z)["held_out"] == 12 and wide["held_out"] == 6
    assert calibration.predictive_summary(calibration.predictive_check(GRID, spread))["rms_z"] > 0.8


def test_the_predictive_check_passes_a_right_model_at_six_seeds():
    """Seeds drawn from the model itself: the held-out z, read through Student's t on k - 2 degrees
    of freedom, has RMS about 1 and the check passes; read against N(0, 1) (the check before) the
    same z has RMS about sqrt(2) at six seeds, and a right model failed."""
    t = np.linspace(0, 165, 12)
    model = calibration.ArmModel(t, 0.3 + 0.3 * (1 - np.exp(-t / 40)), np.where(t > 0, 0.03, 0.0), 0.5, 0.5)
    rng = np.random.default_rng(1)
    new = np.concatenate([calibration.predictive_check(t, model.simulate(rng, 1, 6)[0], sims=1000, seed=i)
                          for i in range(40)])
    old = sps.t.ppf(sps.norm.cdf(new), 4)   # the same z before it was read through t on 4 df
    assert 0.85 < calibration.predictive_summary(new)["rms_z"] < 1.15
    assert calibration.predictive_summary(new)["p_value"] > 0.05
    assert calibration.predictive_summary(old)["rms_z"] > 1.2 and calibration.predictive_summary(old)["p_value"] < 0.05


def test_a_simulated_study_without_an_interval_is_a_miss_not_left_out():
    interval = stats.Interval(np.array([-1.0, np.nan, 0.5, -1.0]), np.array([1.0, np.nan, 2.0, 1.0]), np.ones(4))
    scored = calibration.score(np.array([0.1, np.nan, 1.0, 0.2]), interval, 0.0)
    assert scored["defined"] == 0.75 and scored["coverage"] == 0.5 and scored["decide_up"] == 0.25


def test_cli_calibrate_writes_its_table_and_refuses_bad_seed_counts(tmp_path, capsys):
    import yaml

    from helpers import make_study_runs
    from pods.cli import main as pods_main

    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
         "method": "pods-max_variance-n16-m4", "align": "nearest"}]}))
    out = tmp_path / "cal" / "calibration.csv"
    assert pods_main(["calibrate", "--runs", str(tmp_path), "--study", str(study), "--seeds", "3",
                      "--studies", "20", "--boot", "50", "--out", str(out)]) == 0
    table = __import__("pandas").read_csv(out)
    assert set(table["scenario"]) == {"fitted", "identical"} and set(table["seeds"]) == {3}
    md = out.with_suffix(".md").read_text()
    assert "| isotonic_0.99 | hull | 3 |" in md and "Declared primaries at 3 seeds" in md and "Predictive check" in md
    with pytest.raises(SystemExit):
        pods_main(["calibrate", "--runs", str(tmp_path), "--study", str(study), "--seeds", "1,4"])
    assert "every seed count must be >= 2" in capsys.readouterr().err


def test_speedup_profile_and_survival_curves():
    t = np.linspace(0, 240, 17)
    rng = np.random.default_rng(0)
    base = np.clip(0.3 + 0.2 * (1 - np.exp(-t / 100)) + rng.normal(0, 0.005, (6, 17)), 0, 1)
    meth = np.clip(0.3 + 0.2 * (1 - np.exp(-t / 50)) + rng.normal(0, 0.005, (6, 17)), 0, 1)
    base[:, 0] = meth[:, 0] = 0.3
    rows = verdict.speedup_profile(t, _arm(base), _arm(meth), levels=5, n_boot=300)
    assert len(rows) == 5 and all(r["t_method_s"] < r["t_baseline_s"] for r in rows)
    # exponential approach at twice the rate: half the time to every level below the method's plateau
    assert rows[1]["speedup"] == pytest.approx(2.0, rel=0.15)
    assert all(r["ci_low"] <= r["speedup"] <= r["ci_high"] for r in rows)
    km = verdict.survival_curves(t, _arm(base), _arm(meth), target=0.45)
    for times, fraction in km.values():
        assert np.all(np.diff(fraction) >= 0) and fraction[-1] == pytest.approx(1.0)
    assert np.interp(100, *km["method"]) > np.interp(100, *km["baseline"])


def test_fit_correlation_of_flat_curves_is_independence():
    # a smoke-sized study whose curves never move: no residual variance anywhere, no correlation to fit
    assert calibration.fit_correlation([np.zeros((2, 5)), np.full((2, 5), 0.3) - 0.3]) == (0.0, 0.0)
