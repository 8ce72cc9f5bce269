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


def test_t_boundaries_approach_the_normal_ones_with_many_pairs_and_widen_with_few():
    normal = sequential.boundaries([0.25, 0.5, 0.75, 1])
    many, few = sequential.t_boundaries(200, 4, sims=100_000), sequential.t_boundaries(4, 4, sims=100_000)
    assert many[1:] == pytest.approx(normal[1:], abs=0.05)   # the first look spends ~1e-5: Monte-Carlo noise
    assert few[-1] > many[-1]


@pytest.mark.parametrize("batch,looks", [(4, 4), (3, 3)])
def test_the_confirmation_keeps_false_decisions_under_2_5_percent_per_side(batch, looks):
    studies = 40_000
    bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / studies)
    null = sequential.simulate_sequential([0.0], [1.0], batch=batch, looks=looks, studies=studies, seed=3)
    assert null["decide_up"][0] <= bound and null["decide_down"][0] <= bound
    # and it has power: an effect of 1.5 SD per pair is decided almost always by the cap
    strong = sequential.simulate_sequential([1.5], [1.0], batch=batch, looks=looks, studies=2000, seed=4)
    assert strong["decide_up"][0] > 0.9 and strong["pairs_at_stop"] < batch * looks


def test_a_fixed_sequence_controls_the_familywise_error_when_the_first_hypothesis_is_true():
    studies = 40_000
    bound = 0.05 + 2 * math.sqrt(0.05 * 0.95 / studies)
    # the dangerous configuration: H1 false (passes the test on), H2 true; correlated pairs
    mixed = sequential.simulate_sequential([1.0, 0.0], [1.0, 1.0], batch=4, looks=4, studies=studies,
                                           correlation=0.5, seed=5)
    assert mixed["familywise_false"] <= bound
    both = sequential.simulate_sequential([0.0, 0.0], [1.0, 1.0], batch=4, looks=4, studies=studies,
                                          correlation=0.5, seed=6)
    assert both["familywise_false"] <= bound


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


def test_z_from_t_keeps_the_sign_and_the_p_value():
    from scipy import stats as sps

    z = sequential.z_from_t(np.array([2.5, -2.5]), np.array([3, 3]))
    assert z[0] == pytest.approx(-z[1]) and sps.norm.sf(z[0]) == pytest.approx(sps.t.sf(2.5, 3))


def _summary(rows):
    import pandas as pd

    base = {"hardware": "cpu", "baseline": "grpo-n16-m16", "method": "pods-max_variance-n64-m16", "axis": "time",
            "pairing": "seed", "role": "primary"}
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

    def look(p_hard, p_arith, est=0.02):
        return _summary([
            {"benchmark": "arith_hard", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
             "estimate": est, "p_value": p_hard},
            {"benchmark": "arith", "design": "equal_update", "question": "b", "endpoint": "mean_accuracy",
             "estimate": est, "p_value": p_arith},
            {"benchmark": "arith", "design": "equal_update", "question": "a", "endpoint": "gain_profile",
             "estimate": 1.3, "p_value": 0.5}])

    looks = [confirm.look_z(look(0.2, 1e-9), order)]          # look 1: the first is not decided: nothing is
    out = confirm.walk(looks, order, batch=4, max_looks=4)
    assert list(out["b"].direction) == [0, 0] and not confirm.finished(out, 1, 4)
    looks.append(confirm.look_z(look(1e-6, 1e-6), order))      # look 2: both pass their boundary
    out = confirm.walk(looks, order, batch=4, max_looks=4)
    assert list(out["b"].direction) == [1, 1] and list(out["b"].look) == [2, 2]
    assert not confirm.finished(out, 2, 4) and confirm.finished(out, 4, 4)   # (a) is still open
    table = confirm.confirmation_table(looks, order, batch=4, max_looks=4)
    last = table[(table["look"] == 2) & (table["question"] == "b")]
    assert list(last["verdict"]) == ["higher", "higher"] and set(table["pairs"]) == {4, 8}
    # a negative effect decides the other way
    lower = confirm.look_z(look(1e-9, 1e-9, est=-0.03), order)
    assert (lower["b"] < 0).all()
    # a primary without a p-value is no evidence: undecided at that look, printed as n/a
    broken = look(0.0, 1e-9).assign(p_value=[1e-9, 1e-9, float("nan")])
    z = confirm.look_z(broken, order)
    assert np.isnan(z["a"]).all() and np.isfinite(z["b"]).all()
    table = confirm.confirmation_table([z], order, batch=4, max_looks=4)
    assert set(table[table["question"] == "a"]["verdict"]) == {"undecided"}
    assert "| n/a |" in confirm.confirmation_markdown(table, False)


def test_pods_confirm_writes_the_decisions_after_each_look(tmp_path, capsys):
    from pods.cli import main as pods_main

    rows = lambda **kw: [{"benchmark": b, "design": "equal_update", "question": q, "endpoint": e, **kw}  # noqa: E731
                         for b in ("arith", "arith_hard") for q, e in (("a", "gain_profile"), ("b", "mean_accuracy"))]
    _summary(rows(unit_sd=0.01)).to_csv(tmp_path / "design.csv", index=False)
    _summary(rows(estimate=1.5, p_value=0.3)).to_csv(tmp_path / "look1.csv", index=False)
    _summary(rows(estimate=1.5, p_value=1e-8)).to_csv(tmp_path / "look2.csv", index=False)
    out = tmp_path / "confirm" / "look2.csv"
    assert pods_main(["confirm", "--design", str(tmp_path / "design.csv"), "--looks", str(tmp_path / "look1.csv"),
                      str(tmp_path / "look2.csv"), "--batch", "4", "--max-looks", "4", "--out", str(out)]) == 0
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
