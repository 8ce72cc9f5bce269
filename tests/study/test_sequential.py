"""The group-sequential confirmation: boundaries against published values, its error rates by
simulation at the seed counts a confirmation uses, and the fixed-sequence walk."""
import math

import numpy as np
import pytest

from pods.study import sequential


def test_obrien_fleming_boundaries_match_the_published_ones():
    # Lan-DeMets O'Brien-Fleming spending, one-sided 2.5%, equally spaced looks (gsDesign, sfLDOF)
    assert sequential.boundaries([1 / 3, 2 / 3, 1]) == pytest.approx([3.7103, 2.5114, 1.9930], abs=2e-3)
    assert sequential.boundaries([0.25, 0.5, 0.75, 1]) == pytest.approx([4.3326, 2.9631, 2.3590, 2.0141], abs=2e-3)
    # one look is the fixed-sample test
    assert sequential.boundaries([1.0]) == pytest.approx([1.95996], abs=1e-4)
    with pytest.raises(ValueError, match="must increase to 1"):
        sequential.boundaries([0.5, 0.4, 1])


@pytest.fixture(scope="module")
def levels():
    """t boundaries at alpha / j for j = 1, 2 (4 pairs a batch, 4 looks), one set of null paths."""
    return sequential.level_boundaries(4, 4, 2, sims=1_000_000, seed=11)


def test_t_boundaries_are_exact_at_look_one_approach_the_normal_ones_with_many_pairs_and_widen_with_few(levels):
    normal = sequential.boundaries([0.25, 0.5, 0.75, 1])
    many = sequential.t_boundaries(200, 4, sims=400_000)
    few = levels[1]
    # look 1's statistic alone is standard normal: its boundary is the normal one, exactly, with no error
    assert few.bounds[0] == pytest.approx(normal[0], abs=1e-6) and few.se[0] == 0
    assert many.bounds[1:] == pytest.approx(normal[1:], abs=4 * many.se[1:].max() + 0.01)
    assert few.bounds[-1] > many.bounds[-1]
    # a million paths pin every later look to a Monte-Carlo error below 0.01
    assert np.all(few.se[1:] < 0.01) and np.all(few.se[1:] > 0)
    # the quoted error is honest: another million paths lands within a few of them
    other = sequential.t_boundaries(4, 4, sims=1_000_000, seed=12)
    assert np.all(np.abs(other.bounds[1:] - few.bounds[1:]) < 5 * np.hypot(other.se[1:], few.se[1:]))


def test_the_null_paths_are_the_paired_t_of_normal_differences():
    """The sufficient-statistic draw against the brute-force one: the same distribution of z at each look."""
    from scipy import stats as sps

    fast = sequential.null_t_paths(4, 3, 40_000, seed=1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40_000, 12))
    brute = np.stack([sequential.z_from_t(x[:, :k].mean(1) / (x[:, :k].std(1, ddof=1) / math.sqrt(k)), k - 1)
                      for k in (4, 8, 12)], axis=1)
    for j in range(3):
        assert sps.ks_2samp(fast[:, j], brute[:, j]).pvalue > 1e-3
    assert np.corrcoef(fast[:, 0], fast[:, 2])[0, 1] == pytest.approx(np.corrcoef(brute[:, 0], brute[:, 2])[0, 1],
                                                                      abs=0.03)


@pytest.mark.parametrize("batch,looks", [(4, 4), (3, 3)])
def test_the_confirmation_keeps_false_decisions_under_2_5_percent_per_side(batch, looks):
    studies = 20_000
    bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / studies)
    bounds = sequential.level_boundaries(batch, looks, 1, sims=1_000_000, seed=3)
    null = sequential.simulate_sequential([0.0], [1.0], batch=batch, looks=looks, studies=studies, seed=3,
                                          bounds=bounds)
    assert null["decide_up"][0] <= bound and null["decide_down"][0] <= bound
    # and it has power: an effect of 1.5 SD per pair is decided almost always by the cap
    strong = sequential.simulate_sequential([1.5], [1.0], batch=batch, looks=looks, studies=2000, seed=4,
                                            bounds=bounds)
    assert strong["decide_up"][0] > 0.9 and strong["pairs_at_stop"] < batch * looks


@pytest.mark.parametrize("procedure", ["fixed_sequence", "holm"])
def test_both_procedures_control_the_familywise_error(procedure, levels):
    """Each comparison's false decisions stay at 2.5% per side and any false decision in the family
    at 5% (two-sided tests at 5%): with a true effect that passes the test on to a null, and with
    both null. A false decision on one side can follow one on the other, so the family's rate on
    one side alone can pass 2.5% by that product (docs/verdict.md)."""
    studies = 20_000  # six rates checked at once: each up to three Monte-Carlo standard errors
    side = 0.025 + 3 * math.sqrt(0.025 * 0.975 / studies)
    family = 0.05 + 3 * math.sqrt(0.05 * 0.95 / studies)
    mixed = sequential.simulate_sequential([1.0, 0.0], [1.0, 1.0], batch=4, looks=4, studies=studies,
                                           correlation=0.5, seed=5, procedure=procedure, bounds=levels)
    both = sequential.simulate_sequential([0.0, 0.0], [1.0, 1.0], batch=4, looks=4, studies=studies,
                                          correlation=0.5, seed=6, procedure=procedure, bounds=levels)
    assert mixed["decide_up"][1] <= side and mixed["decide_down"][1] <= side
    assert np.all(both["decide_up"] <= side) and np.all(both["decide_down"] <= side)
    assert mixed["familywise_false"] <= family and both["familywise_false"] <= family


def test_holm_decides_a_later_comparison_that_a_fixed_sequence_blocks(levels):
    """With the first comparison null and the second strong, the fixed sequence never reaches the
    second; Holm's procedure decides it at alpha / 2."""
    kwargs = dict(batch=4, looks=4, studies=4000, seed=7, bounds=levels)
    fixed = sequential.simulate_sequential([0.0, 1.5], [1.0, 1.0], procedure="fixed_sequence", **kwargs)
    holm = sequential.simulate_sequential([0.0, 1.5], [1.0, 1.0], procedure="holm", **kwargs)
    assert fixed["decide_up"][1] < 0.05 < 0.9 < holm["decide_up"][1]


def test_the_walk_tests_in_order_passes_on_at_the_same_look_and_stops_when_all_are_decided():
    bounds = np.array([3.0, 2.5, 2.0])
    z = np.array([[3.5, 2.0, 0.1],      # look 1: H1 decided, H2 not (2.0 < 3.0): stop walking
                  [4.0, 2.6, -2.7],     # look 2: H2 decided up, H3 decided down at the same look
                  [np.nan] * 3])
    out = sequential.hierarchical(z, bounds)
    assert list(out.look) == [1, 2, 2] and list(out.direction) == [1, 1, -1] and out.stopped_at == 2
    # H2 never crosses: H3 is never tested, whatever its statistic
    blocked = sequential.hierarchical(np.array([[3.5, 0.0, 9.0], [3.5, 0.0, 9.0], [3.5, 1.0, 9.0]]), bounds)
    assert list(blocked.direction) == [1, 0, 0] and blocked.stopped_at == 3
    # looks not yet run (NaN) end the walk where the data end
    assert sequential.hierarchical(np.array([[0.5, 0, 0], [np.nan] * 3, [np.nan] * 3]), bounds).stopped_at == 1


def test_holms_walk_passes_alpha_on_at_the_same_look():
    # level j: boundaries for j hypotheses still open (alpha / j)
    bounds = {1: np.array([3.0, 2.0]), 2: np.array([3.3, 2.3]), 3: np.array([3.5, 2.5])}
    z = np.array([[3.6, 3.1, 0.2],      # look 1: 3.6 >= 3.5 (three open); then 3.1 < 3.3 (two open): stop
                  [0.0, -2.4, 2.1]])    # look 2: -2.4 >= 2.3 (two open) decides down; then 2.1 >= 2.0 (one open)
    out = sequential.holm_sequential(z, bounds)
    assert list(out.look) == [1, 2, 2] and list(out.direction) == [1, -1, 1] and out.stopped_at == 2
    # nothing reaches the level of three open hypotheses: nothing is decided
    none = sequential.holm_sequential(np.array([[3.4, 3.4, 3.4], [2.4, 2.4, 2.4]]), bounds)
    assert list(none.direction) == [0, 0, 0] and none.stopped_at == 2


def test_z_from_t_keeps_the_sign_and_the_p_value():
    from scipy import stats as sps

    z = sequential.z_from_t(np.array([2.5, -2.5]), np.array([3, 3]))
    assert z[0] == pytest.approx(-z[1]) and sps.norm.sf(z[0]) == pytest.approx(sps.t.sf(2.5, 3))


def _summary(rows):
    import pandas as pd

    base = {"hardware": "cpu", "baseline": "grpo-n16-m16", "method": "pods-max_variance-n64-m16", "axis": "time",
            "pairing": "seed", "role": "primary"}
    rows = [{"n_seeds_baseline": 4 * r.pop("look", 1), **r} for r in rows]
    return pd.DataFrame([{**base, **r} for r in rows])


def test_a_confirmation_orders_its_primaries_by_a_priori_power_and_decides_by_look():
    from pods.study import confirm

    design = _summary([
        {"benchmark": "arith", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy", "unit_sd": 0.02},
        {"benchmark": "arith_hard", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
         "unit_sd": 0.005},
        {"benchmark": "arith", "design": "equal_update", "question": "a", "endpoint": "gain_profile", "unit_sd": 0.3},
    ])
    order = confirm.plan_order(design, seeds=16)
    assert [k[0] for k in order["b"]] == ["arith_hard", "arith"] and len(order["a"]) == 1
    # a screen's summary holds comparisons the confirmation leaves out: only those its looks analyse
    # are ordered (one never analysed would stay undecided and block the sequence behind it)
    only = confirm.plan_order(design, seeds=16, analysed={order["b"][1], order["a"][0]})
    assert only == {"a": order["a"], "b": [order["b"][1]]}

    def look(p_hard, p_arith, est=0.02, k=1):
        return _summary([
            {"benchmark": "arith_hard", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
             "estimate": est, "p_value": p_hard, "look": k},
            {"benchmark": "arith", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
             "estimate": est, "p_value": p_arith, "look": k},
            {"benchmark": "arith", "design": "equal_update", "question": "a", "endpoint": "gain_profile",
             "estimate": 1.3, "p_value": 0.5, "look": k}])

    bounds = {1: sequential.Boundaries(np.array([4.33, 2.96, 2.38, 2.04]), np.zeros(4))}
    summaries = [look(0.2, 1e-9)]
    looks = [confirm.look_z(summaries[0], order)]          # look 1: the first is not decided: nothing is
    out = confirm.walk(looks, order, bounds, max_looks=4)
    assert list(out["b"].direction) == [0, 0] and not confirm.finished(out, 1, 4)
    summaries.append(look(1e-6, 1e-6, k=2))
    looks.append(confirm.look_z(summaries[1], order))      # look 2: both pass their boundary
    out = confirm.walk(looks, order, bounds, max_looks=4)
    assert list(out["b"].direction) == [1, 1] and list(out["b"].look) == [2, 2]
    assert not confirm.finished(out, 2, 4) and confirm.finished(out, 4, 4)   # (a) is still open
    table = confirm.confirmation_table(looks, order, bounds, max_looks=4, summaries=summaries)
    last = table[(table["look"] == 2) & (table["question"] == "b")]
    assert list(last["verdict"]) == ["higher", "higher"] and set(table["pairs"]) == {4, 8}
    # a negative effect decides the other way
    lower = confirm.look_z(look(1e-9, 1e-9, est=-0.03), order)
    assert (lower["b"] < 0).all()
    # a primary without a p-value is no evidence: undecided at that look, printed as n/a
    broken = look(0.0, 1e-9).assign(p_value=[1e-9, 1e-9, float("nan")])
    z = confirm.look_z(broken, order)
    assert np.isnan(z["a"]).all() and np.isfinite(z["b"]).all()
    table = confirm.confirmation_table([z], order, bounds, max_looks=4, summaries=[broken])
    assert set(table[table["question"] == "a"]["verdict"]) == {"undecided"}
    assert "| n/a |" in confirm.confirmation_markdown(table, False)


def test_pods_confirm_writes_the_decisions_after_each_look(tmp_path, capsys):
    from pods.cli import main as pods_main

    rows = lambda **kw: [{"benchmark": b, "design": "equal_update", "question": q, "endpoint": e, **kw}  # noqa: E731
                         for b in ("arith", "arith_hard") for q, e in (("a", "gain_profile"), ("b", "mean_accuracy"))]
    # the design (a screen's summary) also holds a comparison the looks leave out, first by power
    extra = {"benchmark": "arith", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
             "baseline": "dapo-n16-m16", "unit_sd": 0.001}
    _summary(rows(unit_sd=0.01) + [extra]).to_csv(tmp_path / "design.csv", index=False)
    _summary(rows(estimate=1.5, p_value=0.3)).to_csv(tmp_path / "look1.csv", index=False)
    _summary(rows(estimate=1.5, p_value=1e-8, look=2)).to_csv(tmp_path / "look2.csv", index=False)
    out = tmp_path / "confirm" / "look2.csv"
    assert pods_main(["confirm", "--design", str(tmp_path / "design.csv"), "--looks", str(tmp_path / "look1.csv"),
                      str(tmp_path / "look2.csv"), "--batch", "4", "--max-looks", "4", "--sims", "200000",
                      "--out", str(out)]) == 0
    import pandas as pd

    table = pd.read_csv(out)
    assert set(table["look"]) == {1, 2} and table["finished"].all()
    last = table[table["look"] == 2]
    assert set(last["verdict"]) == {"faster", "higher"} and set(last["decided_at_look"]) == {2}
    assert "Confirmation after look 2 (8 seed pairs): finished" in capsys.readouterr().out
    assert out.with_suffix(".md").is_file()
    # look 1's rows are undecided, look 2's decided: the look number stays a whole number, blank while undecided
    assert "nan" not in out.read_text() and "2.0" not in out.read_text()
    md = out.with_suffix(".md").read_text().splitlines()
    assert all(line.endswith("| 2 |") for line in md if "| higher |" in line)


def test_a_repeated_confidence_interval_widens_the_looks_interval_to_its_boundary():
    from scipy import stats as sps

    from pods.study import confirm, verdict

    k, boundary = 8, 2.96
    q95, qk = sps.t.ppf(0.975, k - 1), sps.t.isf(sps.norm.sf(boundary), k - 1)
    row = {"estimate": 0.02, "ci_low": 0.02 - q95 * 0.005, "ci_high": 0.02 + q95 * 0.005, "n_seeds_baseline": k}
    lo, hi = confirm.repeated_interval(row, verdict.ENDPOINTS["mean_accuracy"], boundary)
    assert (lo, hi) == pytest.approx((0.02 - qk * 0.005, 0.02 + qk * 0.005))
    # a speedup on the log scale: symmetric there, around the estimate
    speed = {"estimate": 1.5, "ci_low": 1.5 * math.exp(-q95 * 0.1), "ci_high": 1.5 * math.exp(q95 * 0.1),
             "n_seeds_baseline": k}
    lo, hi = confirm.repeated_interval(speed, verdict.ENDPOINTS["gain_profile"], boundary)
    assert (math.log(lo), math.log(hi)) == pytest.approx((math.log(1.5) - qk * 0.1, math.log(1.5) + qk * 0.1))
    # at the fixed-sample boundary it is the look's own interval; without one, none
    assert confirm.repeated_interval(row, verdict.ENDPOINTS["mean_accuracy"], sps.norm.isf(0.025)) == \
        pytest.approx((row["ci_low"], row["ci_high"]))
    assert all(map(math.isnan, confirm.repeated_interval({**row, "ci_low": math.nan},
                                                          verdict.ENDPOINTS["mean_accuracy"], boundary)))
