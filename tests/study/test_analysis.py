"""pods.study.analysis: reading runs, grid alignment, mean curves, time to target, bootstrap, studies."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import GRID, make_study_runs, write_run
from pods.cli import main as pods_main
from pods.study import analysis, verdict
from pods.study.curves import (
    EVAL_COLUMNS,
    Target,
    align_to_grid,
    default_grid,
    find_runs,
    isotonic_fit,
    load_evals,
    load_runs,
    mean_curve,
    seed_matrix,
    time_to_target,
)
from pods.study.tables import (
    _fmt,
    _seeds_text,
    cost_sources,
    decomposition_table,
    projection_table,
    read_cost_file,
    read_summary_table,
    summary_markdown,
)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
def test_load_evals_reads_every_run_with_its_path_keys(tmp_path):
    write_run(tmp_path, "grpo-n4-m4", 0, [0, 10], [0.1, 0.5])
    write_run(tmp_path, "pods-max_variance-n8-m4", 3, [0, 10, 20], [0.1, 0.6, 0.7])
    evals = load_evals(tmp_path)
    assert list(evals.columns[:9]) == EVAL_COLUMNS
    assert len(evals) == 5
    pods = evals[evals["method"] == "pods-max_variance-n8-m4"]
    assert set(pods["seed"]) == {3} and list(pods["accuracy"]) == [0.1, 0.6, 0.7]
    assert load_evals(tmp_path / "runs").equals(evals)  # root or runs/ itself


def test_reading_problems_name_the_file(tmp_path):
    run = write_run(tmp_path, "grpo-n4-m4", 0, [0, 10], [0.1, 0.5])
    with open(run / "evals.jsonl", "a") as f:
        f.write('{"step": 3, "train_time_s": 4\n')
    with pytest.raises(ValueError, match=r"evals.jsonl:3: not valid JSON"):
        load_evals(tmp_path)
    (run / "evals.jsonl").write_text(json.dumps({"step": 1, "train_time_s": 1, "eval_set": "a", "accuracy": 1}) + "\n")
    with pytest.raises(ValueError, match=r"evals.jsonl:1: lacks 'mean_length'"):
        load_evals(tmp_path)
    (run / "evals.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"seed0/evals.jsonl is missing"):
        load_evals(tmp_path)
    with pytest.raises(FileNotFoundError, match="no run directories"):
        find_runs(tmp_path / "runs" / "arith")


# --------------------------------------------------------------------------------------------
# Alignment and curves, against brute force
# --------------------------------------------------------------------------------------------
def _brute(times, values, t, how):
    if how == "nearest":
        best = min(range(len(times)), key=lambda i: (abs(times[i] - t), times[i]))
        return values[best]
    if how == "previous":
        before = [i for i in range(len(times)) if times[i] <= t]
        return values[max(before, key=lambda i: times[i])] if before else np.nan
    hits = [values[i] for i in range(len(times)) if times[i] == t]
    return hits[0] if hits else np.nan


@pytest.mark.parametrize("how", ["nearest", "previous", "exact"])
def test_align_to_grid_equals_brute_force(how):
    rng = np.random.default_rng(1)
    for _ in range(40):
        rows = []
        for seed in range(3):
            times = np.unique(rng.choice(np.arange(0, 200, 5), size=rng.integers(1, 12), replace=False))
            rows += [{"seed": seed, "train_time_s": float(t), "accuracy": float(rng.random())}
                     for t in rng.permutation(times)]
        df = pd.DataFrame(rows)
        grid = np.arange(0, 201, 20.0)
        aligned = align_to_grid(df, grid, how=how)
        for seed, part in df.groupby("seed"):
            part = part.sort_values("train_time_s")
            got = aligned[aligned["seed"] == seed]["accuracy"].to_numpy()
            want = [_brute(list(part["train_time_s"]), list(part["accuracy"]), t, how) for t in grid]
            np.testing.assert_array_equal(got, want)


def test_mean_curve_is_mean_and_196_sem_over_seeds():
    rng = np.random.default_rng(0)
    grid = np.array([0.0, 30.0, 60.0])
    matrix = rng.random((5, 3))
    df = pd.DataFrame([{"seed": s, "train_time_s": t, "accuracy": matrix[s, j]}
                       for s in range(5) for j, t in enumerate(grid)])
    curve = mean_curve(df, grid)
    sem = matrix.std(axis=0, ddof=1) / np.sqrt(5)
    np.testing.assert_allclose(curve["mean"], matrix.mean(axis=0))
    np.testing.assert_allclose(curve["sem"], sem)
    np.testing.assert_allclose(curve["hi"] - curve["lo"], 2 * 1.96 * sem)
    assert list(curve["n_seeds"]) == [5, 5, 5]
    one = mean_curve(df[df["seed"] == 0], grid)
    assert one["sem"].isna().all() and list(one["mean"]) == list(matrix[0])
    with pytest.raises(ValueError, match="expected one method"):
        mean_curve(df.assign(method=["a", "b"] * 7 + ["a"]), grid)


def test_default_grid_is_the_shared_schedule_or_a_regular_one():
    shared = pd.DataFrame({"seed": [0, 0, 1, 1], "train_time_s": [0, 1800, 0, 1800]})
    np.testing.assert_array_equal(default_grid(shared), [0, 1800])
    ragged = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "train_time_s": [0, 61, 119, 0, 58, 123]})
    np.testing.assert_array_equal(default_grid(ragged, "nearest"), [0, 60, 120])
    # interpolation needs a later evaluation of every seed: 120 is past seed 0's last one (119)
    np.testing.assert_array_equal(default_grid(ragged), [0, 60])
    # runs shorter than one evaluation interval still get a point after t = 0
    short = pd.DataFrame({"seed": [0, 0, 0, 1, 1], "train_time_s": [0, 61, 119, 0, 40]})
    np.testing.assert_array_equal(default_grid(short), [0, 40])


# --------------------------------------------------------------------------------------------
# Time to target (docs/paper.md 2.3)
# --------------------------------------------------------------------------------------------
def curve(t, y):
    return pd.DataFrame({"t": np.asarray(t, float), "mean": np.asarray(y, float)})


def test_time_to_target_follows_the_papers_definition():
    t = [0, 1, 2, 3, 4]
    base = curve(t, [0.95, 0.5, 0.8, 0.79, 0.7])    # t = 0 above the peak: not the peak, not a finish
    meth = curve(t, [0.95, 0.793, 0.9, 0.9, 0.9])
    tt = time_to_target(base, meth, 0.99)
    assert tt.target == pytest.approx(0.792) and (tt.t_baseline, tt.t_method) == (2.0, 1.0)
    assert tt.speedup == 2.0
    exact = time_to_target(base, meth, 1.0)
    assert (exact.target, exact.t_baseline, exact.t_method, exact.speedup) == (0.8, 2.0, 2.0, 1.0)
    never = time_to_target(base, curve(t, [0.9, 0.1, 0.2, 0.3, 0.4]), 0.99)
    assert never.t_method is None and never.speedup is None and never.t_baseline == 2.0
    with pytest.raises(ValueError, match="different grids"):
        time_to_target(base, curve([0, 1, 2, 3, 5], [0] * 5))
    with pytest.raises(ValueError, match="threshold must be in"):
        time_to_target(base, meth, 1.2)
    with pytest.raises(ValueError, match="unknown time-to-target rule"):
        time_to_target(base, meth, 0.99, rule="median")


T = [0, 1, 2, 3, 4]


def iso(base, meth, fraction=0.99):
    return time_to_target(curve(T, base), curve(T, meth), fraction, rule="isotonic")


def test_isotonic_rule_on_monotone_curves_interpolates_between_grid_points():
    tt = iso([0.1, 0.3, 0.5, 0.7, 0.8], [0.1, 0.5, 0.8, 0.8, 0.8])
    # target 0.99 x 0.8 = 0.792; baseline 3 + 0.092 / 0.1, method 1 + 0.292 / 0.3
    assert tt.target == pytest.approx(0.792)
    assert tt.t_baseline == pytest.approx(3.92) and tt.t_method == pytest.approx(1 + 0.292 / 0.3)
    assert tt.speedup == pytest.approx(3.92 / (1 + 0.292 / 0.3))
    paper = time_to_target(curve(T, [0.1, 0.3, 0.5, 0.7, 0.8]), curve(T, [0.1, 0.5, 0.8, 0.8, 0.8]))
    assert (paper.t_baseline, paper.t_method) == (4.0, 2.0)  # the grid rounds both up


def test_isotonic_rule_pools_noise_instead_of_chasing_the_highest_point():
    np.testing.assert_allclose(isotonic_fit([0.1, 0.5, 0.4, 0.7, 0.6]), [0.1, 0.45, 0.45, 0.65, 0.65])
    tt = iso([0.1, 0.5, 0.4, 0.7, 0.6], [0.1, 0.7, 0.7, 0.7, 0.7])
    assert tt.target == pytest.approx(0.99 * 0.65)  # the plateau, not the lucky 0.7
    assert tt.t_baseline == pytest.approx(2 + (0.6435 - 0.45) / 0.2)
    assert tt.t_method == pytest.approx((0.6435 - 0.1) / 0.6)
    paper = time_to_target(curve(T, [0.1, 0.5, 0.4, 0.7, 0.6]), curve(T, [0.1, 0.7, 0.7, 0.7, 0.7]))
    assert paper.target == pytest.approx(0.693) and (paper.t_baseline, paper.t_method) == (3.0, 1.0)


def test_isotonic_rule_when_the_method_ends_lower_targets_the_level_it_reaches():
    tt = iso([0.1, 0.3, 0.5, 0.7, 0.8], [0.1, 0.2, 0.3, 0.3, 0.3])
    assert tt.target == pytest.approx(0.297)  # 0.99 x the method's plateau, which the baseline passes early
    assert tt.t_baseline == pytest.approx(0.985) and tt.t_method == pytest.approx(1.97)
    assert tt.speedup == pytest.approx(0.5)  # "slower", measured rather than censored
    flat = iso([0.5, 0.5, 0.49, 0.5, 0.5], [0.5, 0.6, 0.7, 0.7, 0.7])  # the baseline never rose
    assert flat == Target(None, None, None, None)


def test_isotonic_rule_takes_a_decline_after_the_peak_as_the_level_held():
    # 0.9 at t = 2 falls back to 0.5, 0.4: the fit pools them into a plateau at 0.6
    np.testing.assert_allclose(isotonic_fit([0.1, 0.6, 0.9, 0.5, 0.4]), [0.1, 0.6, 0.6, 0.6, 0.6])
    tt = iso([0.1, 0.6, 0.9, 0.5, 0.4], [0.1, 0.3, 0.5, 0.7, 0.75])
    assert tt.target == pytest.approx(0.594)
    assert tt.t_baseline == pytest.approx((0.594 - 0.1) / 0.5) and tt.t_method == pytest.approx(2 + 0.094 / 0.2)
    paper = time_to_target(curve(T, [0.1, 0.6, 0.9, 0.5, 0.4]), curve(T, [0.1, 0.3, 0.5, 0.7, 0.75]))
    assert paper.target == pytest.approx(0.891) and paper.t_method is None  # the spike sets an unreachable bar


def test_linear_alignment_interpolates_between_evaluations():
    df = pd.DataFrame({"seed": [0, 0, 0], "train_time_s": [0.0, 61.0, 119.0], "accuracy": [0.1, 0.4, 0.5]})
    seeds, matrix = seed_matrix(df, [0.0, 60.0, 120.0])
    assert seeds == [0] and matrix[0, 0] == 0.1 and matrix[0, 1] == pytest.approx(0.1 + 0.3 * 60 / 61)
    assert np.isnan(matrix[0, 2])  # past the last evaluation: no value, not the last one repeated
    _, nearest = seed_matrix(df, [0.0, 60.0, 120.0], how="nearest")
    assert list(nearest[0]) == [0.1, 0.4, 0.5]
    with pytest.raises(ValueError, match="unknown alignment 'cubic'; choose from"):
        seed_matrix(df, [0.0], how="cubic")


# --------------------------------------------------------------------------------------------
# Studies and the command line
# --------------------------------------------------------------------------------------------
def test_summarize_study_gives_every_endpoint_step_times_phases_and_adjusted_primaries(tmp_path):
    make_study_runs(tmp_path)
    study = [{"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "align": "nearest",
              "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "seeds": [0, 1, 2]}]
    tables = load_runs(tmp_path)
    table = analysis.summarize_study(study, tables.evals, tables.steps, n_boot=200, power=False)
    assert list(table["endpoint"]) == [e for e in verdict.ENDPOINTS.names() if e != "fixed"]
    rows = table.set_index("endpoint")
    r99, r100 = rows.loc["paper_0.99"], rows.loc["paper_1.00"]
    assert r99["name"] == "main" and r99["peak_baseline"] == pytest.approx(0.61)
    assert r99["target_accuracy"] == pytest.approx(0.99 * 0.61)
    assert (r99["target_rule"], r99["target"]) == ("paper", "0.99")
    assert (r99["t_baseline_s"], r99["t_method_s"], r99["speedup"]) == (240.0, 120.0, 2.0)
    assert (r100["t_baseline_s"], r100["t_method_s"], r100["speedup"]) == (240.0, 120.0, 2.0)
    assert r99["s_per_step_baseline"] == pytest.approx(2.0) and r99["s_per_step_method"] == pytest.approx(3.1)
    assert r99["generate_s_per_step_method"] == pytest.approx(1.6)
    assert r99["update_s_per_step_baseline"] == pytest.approx(1.1)
    # the decomposition from the logged steps (10 per evaluation), interpolated at the crossing times
    assert 30 < r99["steps_baseline"] <= 40 and 10 < r99["steps_method"] <= 20
    assert r99["speedup"] == pytest.approx(r99["step_efficiency"] / r99["step_cost_ratio"])
    primary = table[table["role"] == "primary"]
    assert set(primary["endpoint"]) == {"gain_profile", "mean_accuracy"}
    assert set(table["pairing"]) == {"seed"} and rows.loc["mean_accuracy", "interval_method"] == "paired_t"
    assert primary["p_adjusted"].notna().all() and table.loc[table["role"] == "secondary", "p_adjusted"].isna().all()
    assert rows.loc["mean_accuracy", "verdict_adjusted"] in ("higher", "undecided", "lower")
    with_target = analysis.summarize_study([{**study[0], "target_accuracy": 0.55}], tables.evals, n_boot=200,
                                           power=False)
    assert with_target.set_index("endpoint").loc["fixed", "target_accuracy"] == 0.55
    only_two = analysis.summarize_study([{**study[0], "seeds": [0, 1]}], tables.evals, n_boot=200, power=False)
    assert set(only_two["n_seeds_baseline"]) == {2}


def test_the_step_axis_compares_at_equal_steps_in_a_family_of_its_own(tmp_path):
    """GRPO does twice the steps per second, PODS learns as much per second: equal on the clock,
    PODS twice as efficient per step. The step axis reads the curves at equal steps, up to the
    fewest steps any seed reached, and its primaries are adjusted apart from the clock's."""
    times = [0.0, 60.0, 120.0, 180.0, 240.0]
    for seed in range(3):
        noise = 0.01 * seed
        write_run(tmp_path, "grpo-n4-m4", seed, times, [0.1, 0.3 + noise, 0.5, 0.6, 0.6 + noise],
                  eval_steps=[0, 40, 80, 120, 160])
        write_run(tmp_path, "pods-max_variance-n16-m4", seed, times, [0.1, 0.3 - noise, 0.5, 0.6, 0.6 + noise],
                  eval_steps=[0, 20, 40, 60, 80])
    pair = {"name": "alternatives", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
            "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4"}
    study = [pair, {**pair, "axis": "step", "grid_s": 20}]
    tables = load_runs(tmp_path)
    table = analysis.summarize_study(study, tables.evals, tables.steps, n_boot=400, power=False)
    iso = table[table["endpoint"] == "isotonic_0.99"].set_index("axis")
    assert iso.loc["time", "speedup"] == pytest.approx(1.0, abs=0.05)
    assert iso.loc["step", "speedup"] == pytest.approx(2.0, rel=0.05)      # half the steps to the same level
    assert iso.loc["step", "budget_s"] == 80.0                              # PODS's last step: equal steps only
    assert np.isnan(iso.loc["step", "step_efficiency"]) and iso.loc["time", "step_efficiency"] > 0
    assert set(table.loc[table["role"] == "primary", "multiplicity"]) == {"holm over 1"}   # two families of one
    md = summary_markdown(table)
    assert md.count("aligned by optimiser steps") == 2 and "comparisons on this axis" in md
    assert set(decomposition_table(table)["speedup"].dropna()) <= set(iso.loc[["time"], "speedup"]) | set(
        table[(table["axis"] == "time")]["speedup"].dropna())
    # a study on the clock alone prints no axis column (the paper's studies read as before)
    assert "| axis |" not in summary_markdown(table[table["axis"] == "time"])
    with pytest.raises(ValueError, match=r"comparison: axis: 'tokens' is not one of \['time', 'step', 'cost'\]"):
        analysis.validate_comparison({**pair, "axis": "tokens"})


def test_a_fixed_grid_past_a_seeds_last_evaluation_is_refused_under_linear_alignment(tmp_path):
    make_study_runs(tmp_path)  # some seeds' last evaluations land before 240 s
    comp = {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
            "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "grid_s": 60, "t_max_s": 240}
    evals = load_runs(tmp_path).evals
    with pytest.raises(ValueError,
                       match=r"grid runs to 240 s but seed \d of .* last evaluated at 23\d s.*align: nearest"):
        analysis.comparison_arms(comp, evals)
    grid, base, meth, _, _ = analysis.comparison_arms({**comp, "align": "nearest"}, evals)
    assert grid[-1] == 240 and not np.isnan(base.curves).any() and not np.isnan(meth.curves).any()
    grid, base, _, _, _ = analysis.comparison_arms({**comp, "t_max_s": 180}, evals)
    assert grid[-1] == 180 and not np.isnan(base.curves).any()


def test_read_summary_table_keeps_the_target_as_text(tmp_path):
    path = tmp_path / "summary.csv"
    path.write_text("benchmark,target_rule,target,speedup\narith,paper,0.99,1.09\narith,paper,1.00,\n")
    assert list(read_summary_table(path)["target"]) == ["0.99", "1.00"]


def test_projection_divides_our_step_efficiency_by_the_other_machines_cost_ratio(tmp_path):
    ours = pd.DataFrame([{"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
                          "baseline": "grpo-n16-m16", "method": "pods-max_variance-n64-m16", "target_rule": "isotonic",
                          "target": "0.99", "speedup": 1.2, "ci_low": 0.9, "ci_high": 1.6, "step_efficiency": 2.0,
                          "step_efficiency_ci_low": 1.5, "step_efficiency_ci_high": 2.7, "step_cost_ratio": 1.667}])
    paper = pd.DataFrame([{"name": "gsm8k-l40s", "design": "equal_update", "step_cost_ratio": 1.25},
                          {"name": "h100x8", "design": "equal_generation", "step_cost_ratio": 0.6}])
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"hardware": "my-gpu", "s_per_step": {"grpo-n16-m16": 2.0,
                                                                      "pods-max_variance-n64-m16": 2.5}}))
    table = projection_table(ours, cost_sources(paper, [costs]))
    assert list(table["projected_onto"]) == ["paper gsm8k-l40s", "my-gpu (costs.json)"]  # h100x8: other design
    assert list(table["projected_speedup"]) == pytest.approx([2.0 / 1.25, 2.0 / 1.25])
    assert list(table["projected_ci_low"]) == pytest.approx([1.2, 1.2]) and set(table["kind"]) == {"projection"}
    costs.write_text(json.dumps({"hardware": "x", "s_per_step": {"grpo-n16-m16": -1}}))
    with pytest.raises(ValueError, match="must be a positive number"):
        read_cost_file(costs)


def test_study_file_errors_name_the_file_and_comparison(tmp_path):
    good = {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
            "method": "pods-max_variance-n16-m4"}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump([good]))
    assert analysis.load_study(path) == [good]
    path.write_text(yaml.safe_dump({"comparisons": [good, {**good, "design": "equal_time"}]}))
    with pytest.raises(ValueError, match=r"study.yaml: comparison 2: design: 'equal_time' is not one of"):
        analysis.load_study(path)
    path.write_text(yaml.safe_dump([{k: v for k, v in good.items() if k != "baseline"}]))
    with pytest.raises(ValueError, match="comparison 1: \\(top level\\): 'baseline' is a required property"):
        analysis.load_study(path)
    path.write_text(yaml.safe_dump([{**good, "method": "pods-n16"}]))
    with pytest.raises(ValueError, match="comparison 1: method: method 'pods-n16'"):
        analysis.load_study(path)


def test_cli_analyze_writes_csv_and_markdown(tmp_path, capsys):
    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
         "method": "pods-max_variance-n16-m4", "align": "nearest"},
        {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "pods-max_variance-n16-m4",
         "method": "grpo-n4-m4", "align": "nearest"}]}))
    out = tmp_path / "tables" / "summary.csv"
    assert pods_main(["analyze", "--runs", str(tmp_path / "runs"), "--study", str(study), "--out", str(out),
                      "--n-boot", "200"]) == 0
    table = pd.read_csv(out)
    per = len(verdict.ENDPOINTS) - 1  # no fixed target in this study
    assert len(table) == 2 * per
    first, second = table.iloc[:per].set_index("endpoint"), table.iloc[per:].set_index("endpoint")
    assert first.loc["paper_0.99", "speedup"] == 2.0
    assert np.isnan(second.loc["paper_0.99", "t_method_s"])  # GRPO never reaches the PODS peak
    assert second.loc["paper_0.99", "censored"].startswith("method not reached")
    assert (table.loc[table["role"] == "primary", "multiplicity"] == "holm over 2").all()
    markdown = out.with_suffix(".md").read_text()
    assert markdown.startswith("## (a)") and "| main | arith |" in markdown and "## (b)" in markdown
    assert "not reached" in markdown
    assert not list(out.parent.glob(".*tmp"))
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(tmp_path / "none.yaml")]) == 2
    assert "study file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pods_main(["analyze", "--runs", str(tmp_path), "--study", str(study), "--n-boot", "20"])
    assert "--n-boot: must be >= 200, got 20" in capsys.readouterr().err


def test_analyze_names_a_missing_runs_folder_and_the_kind_of_file_study_takes(tmp_path, capsys):
    """A workflow config given as --study and a runs folder that does not exist: both said in one
    line, before anything is read or computed."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "config/config.yaml"
    missing = tmp_path / "nothing"
    assert pods_main(["analyze", "--runs", str(missing), "--study", str(config), "--out", str(tmp_path / "s.csv")]) == 2
    assert capsys.readouterr().err == (
        f"pods analyze: error: runs folder {missing} does not exist (--runs takes a results folder holding runs/, "
        f"e.g. results); {config} is a workflow config (snakemake --configfile), not a study file: --study takes the "
        f"comparisons file the workflow writes from it, e.g. results/study.yaml\n")
    # a layer in the config's form (comparisons over benchmarks and methods) is one too
    layer = tmp_path / "layer.yaml"
    layer.write_text(yaml.safe_dump({"comparisons": [{"name": "main", "design": "equal_update",
                                                      "benchmarks": ["arith"], "methods": ["grpo-n4-m4"]}]}))
    with pytest.raises(ValueError, match=r"layer.yaml is a workflow config \(snakemake --configfile\), not a study"):
        analysis.load_study(layer)
    make_study_runs(tmp_path)
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err == (
        f"pods analyze: error: study file {tmp_path / 'none.yaml'} does not exist (--study takes the comparisons file "
        f"the workflow writes, e.g. results/study.yaml)\n")
    assert not (tmp_path / "s.csv").exists()


def test_infinite_numbers_print_as_what_they_mean_in_their_column():
    # a speedup or an interval bound that is infinite is "inf"; a seed count past the search "> 1000"
    assert _fmt(float("inf")) == "inf" and _fmt(float("-inf")) == "-inf"
    assert _fmt(float("nan")) == "" and _fmt(1.23456) == "1.235"
    assert _seeds_text(float("inf")) == "> 1000" and _seeds_text(8.0) == "8"


def test_one_seed_per_arm_gives_estimates_without_intervals_and_decides_nothing(tmp_path):
    """A study of one seed (a smoke test, a first look) is summarised: estimates, no interval
    (one seed has no spread to resample), p = 1, every verdict undecided."""
    make_study_runs(tmp_path)
    study = [{"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "align": "nearest",
              "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "seeds": [0]}]
    tables = load_runs(tmp_path)
    table = analysis.summarize_study(study, tables.evals, tables.steps, n_boot=200, power=False)
    rows = table.set_index("endpoint")
    assert rows.loc["paper_0.99", "speedup"] > 1 and set(table["n_seeds_baseline"]) == {1}
    assert table["ci_low"].isna().all() and table["ci_high"].isna().all()
    assert set(table["verdict_adjusted"].dropna()) <= {"undecided"}


def _on_cost_clock(root, method, seed, c, se, accs, steps):
    """A finished run trained on the cost clock: evaluations at `steps`, cost_time_s = step x c."""
    run = write_run(root, method, seed, [s * c for s in steps], accs, eval_steps=steps)
    evals = [json.loads(line) for line in (run / "evals.jsonl").read_text().splitlines()]
    (run / "evals.jsonl").write_text("".join(json.dumps({**e, "cost_time_s": e["step"] * c,
                                                           "train_time_s": e["train_time_s"] * 1.3}) + "\n"
                                             for e in evals))
    summary = json.loads((run / "summary.json").read_text())
    summary.update(step_cost_s=c, step_cost_se=se, train_time_s=summary["train_time_s"] * 1.3)
    (run / "summary.json").write_text(json.dumps(summary))


def test_the_cost_clock_reads_curves_at_step_times_measured_cost_and_carries_its_error(tmp_path):
    rng = np.random.default_rng(0)
    steps = list(range(0, 121, 10))
    for seed in range(4):
        shift = rng.normal(0, 0.01)
        base = [0.2 + 0.4 * (1 - math.exp(-s / 60)) + shift for s in steps]
        meth = [0.2 + 0.4 * (1 - math.exp(-s / 30)) + shift + rng.normal(0, 0.005) for s in steps]
        _on_cost_clock(tmp_path, "grpo-n4-m4", seed, 1.0, 0.0, base, steps)
        _on_cost_clock(tmp_path, "pods-max_variance-n16-m4", seed, 1.5, 0.0, meth, steps)
    comp = {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
            "method": "pods-max_variance-n16-m4", "axis": "cost", "grid_s": 10, "t_max_s": 120}
    tables = load_runs(tmp_path)
    table = analysis.summarize_study([comp], tables.evals, tables.steps, tables.summaries, n_boot=400, power=False)
    iso = table.set_index("endpoint").loc["isotonic_0.99"]
    # the method learns 2x per step at 1.5x the cost: about 1.33x on the cost clock, decomposed exactly
    assert iso["step_cost_ratio"] == pytest.approx(1.5, rel=1e-6)
    assert iso["speedup"] == pytest.approx(iso["step_efficiency"] / iso["step_cost_ratio"])
    assert iso["t_baseline_s"] <= 120 and set(table["axis"]) == {"cost"}
    # with the cost measurement's error the interval widens, the estimate stays
    for run in (tmp_path / "runs").rglob("summary.json"):
        s = json.loads(run.read_text())
        run.write_text(json.dumps({**s, "step_cost_se": 0.1 * s["step_cost_s"]}))
    noisy = analysis.summarize_study([comp], load_runs(tmp_path).evals, None, load_runs(tmp_path).summaries,
                                     n_boot=400, power=False).set_index("endpoint").loc["gain_profile"]
    clean = table.set_index("endpoint").loc["gain_profile"]
    assert noisy["estimate"] == pytest.approx(clean["estimate"])
    assert noisy["ci_high"] / noisy["ci_low"] > clean["ci_high"] / clean["ci_low"]
    assert analysis.step_cost_log_se(comp, load_runs(tmp_path).summaries) == pytest.approx(0.1 * math.sqrt(2))


def test_a_missing_setting_reads_missing_not_not_reached():
    import pandas as pd

    from pods.study.tables import to_markdown

    table = to_markdown(pd.DataFrame([
        {"setting": "a", "target_rule": "paper", "speedup": None, "status": "missing: a.json"},
        {"setting": "b", "target_rule": "paper", "speedup": None, "status": "not reached"}]))
    assert "| a | paper |  | missing: a.json |" in table and "| b | paper | not reached | not reached |" in table


def test_analyze_reads_only_the_runs_its_study_names(tmp_path, capsys):
    """A confirmation's look analyses its seeds while the next batch trains beside them: a run of
    another seed still `running`, and a broken run of an arm no comparison names, change nothing."""
    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
         "method": "pods-max_variance-n16-m4", "align": "nearest", "seeds": [0, 1, 2]}]}))
    before, after = tmp_path / "before.csv", tmp_path / "after.csv"
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(study), "--out", str(before)]) == 0
    running = write_run(tmp_path, "grpo-n4-m4", 3, GRID, [0.1, 0.2, 0.3, 0.4, 0.5])
    summary = json.loads((running / "summary.json").read_text())
    (running / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    broken = write_run(tmp_path, "grpo-n8-m8", 0, GRID, [0.1, 0.2, 0.3, 0.4, 0.5])
    (broken / "evals.jsonl").write_text("{not json\n")
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(study), "--out", str(after)]) == 0
    assert after.read_bytes() == before.read_bytes()
    # named by the study, the running seed is refused as before: only a complete run is a result
    study.write_text(study.read_text().replace("- 2\n", "- 2\n  - 3\n"))
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(study), "--out", str(after)]) == 2
    assert "seed3/summary.json: status is 'running'" in capsys.readouterr().err


def test_the_field_table_reads_every_number_off_the_summary_and_the_docs_show_it_as_generated():
    """PODS beside the field: one row per comparison on the clock, its speedup (a)'s primary, its
    gain profile by optimiser steps (learning per step), the clock row's cost ratio, (b)'s primary;
    every page that shows the table (between `<!-- field:start -->` and `<!-- field:end -->`; the
    ablations' between `<!-- ablations:start -->` and its end) shows it as the committed summary
    gives it."""
    import re
    from pathlib import Path

    from pods.study.tables import field_table, to_markdown

    root = Path(__file__).resolve().parents[2]
    summary = pd.read_csv(root / "results/alternatives/summary.csv")
    table = field_table(summary)
    on_clock = summary[summary["axis"] != "step"]
    assert len(table) == on_clock[["benchmark", "baseline", "method"]].drop_duplicates().shape[0]
    a = on_clock[on_clock["endpoint"] == "gain_profile"].reset_index(drop=True)
    b = on_clock[on_clock["endpoint"] == "mean_accuracy"].reset_index(drop=True)
    # learning per step: the same pair's gain profile by optimiser steps, in the same order
    steps = summary[(summary["axis"] == "step") & (summary["endpoint"] == "gain_profile")].reset_index(drop=True)
    assert (steps[["benchmark", "baseline", "method"]] == a[["benchmark", "baseline", "method"]]).all().all()
    for i, row in table.iterrows():
        assert row["wall-clock speedup [95% CI]"].startswith(f"{a.loc[i, 'estimate']:.3g} [")
        assert row["learning per step [95% CI]"] == (f"{steps.loc[i, 'estimate']:.3g} [{steps.loc[i, 'ci_low']:.3g}, "
                                                     f"{steps.loc[i, 'ci_high']:.3g}]")
        assert row["cost per step [95% CI]"].startswith(f"{a.loc[i, 'step_cost_ratio']:.3g} [")
        assert row["mean accuracy difference [95% CI]"].startswith(f"{b.loc[i, 'estimate']:.3g} [")
        decisions = (a.loc[i, "verdict_adjusted"], b.loc[i, "verdict_adjusted"])
        assert (row["(a) decision"], row["(b) decision"]) == decisions
    # the field's block, and the ablations' (the same table of their own summary)
    for marker, path in (("field", "results/alternatives/summary.csv"), ("ablations", "results/ablations/summary.csv")):
        expected = to_markdown(field_table(pd.read_csv(root / path)))
        pages = [p for p in (root / "README.md", *sorted((root / "docs").glob("*.md")))
                 if f"<!-- {marker}:start -->" in p.read_text()]
        assert pages, marker
        for page in pages:
            shown = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", page.read_text(),
                              flags=re.S).group(1)
            assert shown == expected, (page, marker)


def test_calibrate_check_only_prints_the_predictive_check_of_the_study_it_names(tmp_path, capsys):
    """`pods calibrate --check-only`: the leave-one-seed-out check over the study's arms, the same
    sentence the full calibration ends with, written to the .md only when --out is given."""
    from pods.study import calibration
    from pods.study.views import comparisons_from_runs

    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
         "method": "pods-max_variance-n16-m4", "align": "nearest", "seeds": [0, 1, 2]}]}))
    running = write_run(tmp_path, "grpo-n4-m4", 3, GRID, [0.1, 0.2, 0.3, 0.4, 0.5])  # not the study's: unread
    (running / "summary.json").write_text("{}")
    assert pods_main(["calibrate", "--check-only", "--runs", str(tmp_path), "--study", str(study)]) == 0
    line = capsys.readouterr().out.strip()
    assert line == calibration.predictive_line(comparisons_from_runs(tmp_path, study))
    assert line.startswith("Predictive check of the population model (leave one seed out, mean_accuracy, 6 held-out")
    assert not list(tmp_path.glob("*.csv")) and not (tmp_path / "results").exists()
    out = tmp_path / "check.md"
    args = ["calibrate", "--check-only", "--runs", str(tmp_path), "--study", str(study)]
    assert pods_main([*args, "--out", str(out)]) == 0
    assert out.read_text().endswith(line + "\n") and not out.with_suffix(".csv").exists()


def test_pods_groups_weights_flat_groups_by_the_groups_each_step_generated(tmp_path, capsys):
    """`pods groups`: the flat share over generated groups (rollouts_generated / n per step, DAPO's
    refills included) and the prompts each run drew, skipped ones included, against a hand count."""
    def steps(*rows):  # (rollouts_generated, zero_variance_frac, prompts_skipped)
        return [{"rollouts_generated": g, "zero_variance_frac": z, "prompts_skipped": s} for g, z, s in rows]

    logged = {0: steps((8, 0.5, 1), (16, 0.25, 0)), 1: steps((8, 0.0, 0), (8, 1.0, 5))}
    for seed, extra in logged.items():
        run = write_run(tmp_path, "greso-n4-m4", seed, [0, 10], [0.1, 0.2], steps=[(0.5, 0.5, 1.0)] * 2)
        records = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
        (run / "steps.jsonl").write_text("".join(json.dumps({**r, **e}) + "\n" for r, e in zip(records, extra)))
    write_run(tmp_path, "grpo-n4-m4", 0, [0, 10], [0.1, 0.2], steps=[(0.5, 0.5, 1.0)])
    (tmp_path / "runs/arith/cpu/grpo-n4-m4/seed0/steps.jsonl").write_text(json.dumps(
        {"step": 1, "train_time_s": 1.0, "generate_s": 0.5, "reward_s": 0.0, "select_s": 0.0, "logprob_s": 0.0,
         "update_s": 0.5, "step_s": 1.0, "rollouts_generated": 12, "zero_variance_frac": 1 / 3}) + "\n")
    out = tmp_path / "groups.csv"
    assert pods_main(["groups", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    table = pd.read_csv(out).set_index("method")
    # GRESO: groups 2 + 4 (seed 0) and 2 + 2 (seed 1), of them flat 1 + 1 and 0 + 2: 4 of 10; drawn
    # (2 + 1) + 4 = 7 and 2 + (2 + 5) = 9
    assert table.loc["greso-n4-m4", "flat_share"] == pytest.approx(4 / 10)
    greso = table.loc["greso-n4-m4"]
    assert (greso["prompts_drawn_max"], greso["prompts_drawn_mean"], greso["seeds"]) == (9, 8.0, 2)
    assert table.loc["grpo-n4-m4", "flat_share"] == pytest.approx(1 / 3)
    assert table.loc["grpo-n4-m4", "prompts_drawn_max"] == 3   # no prompts_skipped column: nothing skipped
    assert "| arith | cpu | greso-n4-m4 | 2 | 0.400 | 9 | 8 |" in capsys.readouterr().out
    assert out.with_suffix(".md").is_file()
