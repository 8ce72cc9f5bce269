"""pods.analysis: reading runs, grid alignment, mean curves, time to target, bootstrap, studies."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pods import analysis
from pods.cli import main as pods_main
from pods.config import parse_method
from pods.runs import build_summary


def write_run(root: Path, method: str, seed: int, times, accs, lengths=None, benchmark="arith",
              hardware="cpu", eval_set="arith", steps=None) -> Path:
    """A finished run directory as the trainer leaves it: evals, steps and a consistent summary."""
    run = root / "runs" / benchmark / hardware / method / f"seed{seed}"
    run.mkdir(parents=True, exist_ok=True)
    lengths = lengths if lengths is not None else [10.0 + i for i in range(len(times))]
    evals = [{"step": 10 * i, "train_time_s": t, "wall_time_s": t + 1, "eval_set": eval_set, "accuracy": a,
              "mean_length": n, "n_items": 100, "repeats": 1} for i, (t, a, n) in enumerate(zip(times, accs, lengths))]
    step_log = [{"step": i + 1, "train_time_s": total * (i + 1), "generate_s": gen, "reward_s": 0.0, "select_s": 0.0,
                 "logprob_s": 0.0, "update_s": upd, "step_s": total} for i, (gen, upd, total) in enumerate(steps or [])]
    (run / "evals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    if steps is not None:
        (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in step_log))
    parsed = parse_method(method)
    identity = {"benchmark": benchmark, "hardware": hardware, "method": method, "rule": parsed.rule,
                "n": parsed.n, "m": parsed.m, "seed": seed}
    summary = build_summary(identity, evals, step_log, status="complete",
                            train_time_s=max(float(times[-1]), step_log[-1]["train_time_s"] if step_log else 0.0))
    (run / "summary.json").write_text(json.dumps(summary))
    return run


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
def test_load_evals_reads_every_run_with_its_path_keys(tmp_path):
    write_run(tmp_path, "grpo-n4-m4", 0, [0, 10], [0.1, 0.5])
    write_run(tmp_path, "pods-max_variance-n8-m4", 3, [0, 10, 20], [0.1, 0.6, 0.7])
    evals = analysis.load_evals(tmp_path)
    assert list(evals.columns[:9]) == analysis.EVAL_COLUMNS
    assert len(evals) == 5
    pods = evals[evals["method"] == "pods-max_variance-n8-m4"]
    assert set(pods["seed"]) == {3} and list(pods["accuracy"]) == [0.1, 0.6, 0.7]
    assert analysis.load_evals(tmp_path / "runs").equals(evals)  # root or runs/ itself


def test_reading_problems_name_the_file(tmp_path):
    run = write_run(tmp_path, "grpo-n4-m4", 0, [0, 10], [0.1, 0.5])
    with open(run / "evals.jsonl", "a") as f:
        f.write('{"step": 3, "train_time_s": 4\n')
    with pytest.raises(ValueError, match=r"evals.jsonl:3: not valid JSON"):
        analysis.load_evals(tmp_path)
    (run / "evals.jsonl").write_text(json.dumps({"step": 1, "train_time_s": 1, "eval_set": "a", "accuracy": 1}) + "\n")
    with pytest.raises(ValueError, match=r"evals.jsonl:1: lacks 'mean_length'"):
        analysis.load_evals(tmp_path)
    (run / "evals.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"seed0/evals.jsonl is missing"):
        analysis.load_evals(tmp_path)
    with pytest.raises(FileNotFoundError, match="no run directories"):
        analysis.find_runs(tmp_path / "runs" / "arith")


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
        aligned = analysis.align_to_grid(df, grid, how=how)
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
    curve = analysis.mean_curve(df, grid)
    sem = matrix.std(axis=0, ddof=1) / np.sqrt(5)
    np.testing.assert_allclose(curve["mean"], matrix.mean(axis=0))
    np.testing.assert_allclose(curve["sem"], sem)
    np.testing.assert_allclose(curve["hi"] - curve["lo"], 2 * 1.96 * sem)
    assert list(curve["n_seeds"]) == [5, 5, 5]
    one = analysis.mean_curve(df[df["seed"] == 0], grid)
    assert one["sem"].isna().all() and list(one["mean"]) == list(matrix[0])
    with pytest.raises(ValueError, match="expected one method"):
        analysis.mean_curve(df.assign(method=["a", "b"] * 7 + ["a"]), grid)


def test_default_grid_is_the_shared_schedule_or_a_regular_one():
    shared = pd.DataFrame({"seed": [0, 0, 1, 1], "train_time_s": [0, 1800, 0, 1800]})
    np.testing.assert_array_equal(analysis.default_grid(shared), [0, 1800])
    ragged = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1], "train_time_s": [0, 61, 119, 0, 58, 123]})
    np.testing.assert_array_equal(analysis.default_grid(ragged), [0, 60, 120])
    # runs shorter than one evaluation interval still get a point after t = 0
    short = pd.DataFrame({"seed": [0, 0, 0, 1, 1], "train_time_s": [0, 61, 119, 0, 40]})
    np.testing.assert_array_equal(analysis.default_grid(short), [0, 40])


# --------------------------------------------------------------------------------------------
# Time to target (PAPER.md 2.3)
# --------------------------------------------------------------------------------------------
def curve(t, y):
    return pd.DataFrame({"t": np.asarray(t, float), "mean": np.asarray(y, float)})


def test_time_to_target_follows_the_papers_definition():
    t = [0, 1, 2, 3, 4]
    base = curve(t, [0.95, 0.5, 0.8, 0.79, 0.7])    # t = 0 above the peak: not the peak, not a finish
    meth = curve(t, [0.95, 0.793, 0.9, 0.9, 0.9])
    tt = analysis.time_to_target(base, meth, 0.99)
    assert tt.target == pytest.approx(0.792) and (tt.t_baseline, tt.t_method) == (2.0, 1.0)
    assert tt.speedup == 2.0
    exact = analysis.time_to_target(base, meth, 1.0)
    assert (exact.target, exact.t_baseline, exact.t_method, exact.speedup) == (0.8, 2.0, 2.0, 1.0)
    never = analysis.time_to_target(base, curve(t, [0.9, 0.1, 0.2, 0.3, 0.4]), 0.99)
    assert never.t_method is None and never.speedup is None and never.t_baseline == 2.0
    with pytest.raises(ValueError, match="different grids"):
        analysis.time_to_target(base, curve([0, 1, 2, 3, 5], [0] * 5))
    with pytest.raises(ValueError, match="threshold must be in"):
        analysis.time_to_target(base, meth, 1.2)


def _arm_frame(matrix, grid):
    return pd.DataFrame([{"seed": s, "train_time_s": t, "accuracy": matrix[s][j]}
                         for s in range(len(matrix)) for j, t in enumerate(grid)])


def test_bootstrap_is_reproducible_and_brackets_the_estimate():
    grid = [0.0, 1, 2, 3, 4]
    rng = np.random.default_rng(5)
    base = np.clip(np.array([0.1, 0.4, 0.6, 0.75, 0.8]) + rng.normal(0, 0.03, (8, 5)), 0, 1)
    meth = np.clip(np.array([0.1, 0.7, 0.8, 0.82, 0.83]) + rng.normal(0, 0.03, (8, 5)), 0, 1)
    b, m = _arm_frame(base, grid), _arm_frame(meth, grid)
    one = analysis.bootstrap_speedup(b, m, grid, n_boot=300, seed=3)
    assert one == analysis.bootstrap_speedup(b, m, grid, n_boot=300, seed=3)
    point = analysis.time_to_target(analysis.mean_curve(b, grid), analysis.mean_curve(m, grid)).speedup
    assert one["ci_low"] <= point <= one["ci_high"] and one["reached_frac"] == 1.0
    # every seed identical: every replicate is the point estimate
    flat = analysis.bootstrap_speedup(_arm_frame([base[0]] * 4, grid), _arm_frame([meth[0]] * 4, grid), grid, n_boot=50)
    single = analysis.time_to_target(curve(grid, base[0]), curve(grid, meth[0])).speedup
    assert flat["ci_low"] == flat["ci_high"] == single
    # a method that never gets there: no replicate has a speedup
    low = analysis.bootstrap_speedup(b, _arm_frame(base * 0.5, grid), grid, n_boot=50)
    assert low["reached_frac"] == 0 and low["ci_low"] == low["ci_high"] == 0  # never reached: speedup 0
    # half the seeds fail: replicates that miss count as 0, so the interval starts at 0 (not above 1)
    mixed = analysis.bootstrap_speedup(b, _arm_frame(np.concatenate([meth[:4], base[4:] * 0.93]), grid), grid,
                                       n_boot=300)
    assert 0.05 < mixed["reached_frac"] < 0.95 and mixed["ci_low"] == 0 and mixed["ci_high"] > 1


# --------------------------------------------------------------------------------------------
# Studies and the command line
# --------------------------------------------------------------------------------------------
GRID = [0, 60, 120, 180, 240]


def make_study_runs(root: Path) -> None:
    for seed in range(3):
        jitter = [0, 1.0, -2.0, 0.5, 1.5, -1.0]
        times = [t + jitter[(i + seed) % 6] * (t > 0) for i, t in enumerate(GRID)]
        write_run(root, "grpo-n4-m4", seed, times, [0.1, 0.3, 0.5, 0.6, 0.6 + 0.01 * seed],
                  steps=[(0.5, 1.0, 2.0), (0.5, 1.2, 2.0)])
        write_run(root, "pods-max_variance-n16-m4", seed, times, [0.1, 0.55, 0.62, 0.65, 0.66],
                  steps=[(1.5, 1.0, 3.0), (1.7, 1.0, 3.2)])


def test_summarize_gives_speedups_step_times_and_phases(tmp_path):
    make_study_runs(tmp_path)
    study = [{"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
              "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "seeds": [0, 1, 2]}]
    runs = analysis.find_runs(tmp_path)
    table = analysis.summarize(study, analysis.load_evals(runs), analysis.load_steps(runs), n_boot=100)
    assert list(table["rule"]) == ["0.99", "1.00"]
    r99, r100 = table.iloc[0], table.iloc[1]
    assert r99["name"] == "main" and r99["peak_baseline"] == pytest.approx(0.61)
    assert r99["threshold"] == pytest.approx(0.99 * 0.61)
    assert (r99["t_baseline_s"], r99["t_method_s"], r99["speedup"]) == (240.0, 120.0, 2.0)
    assert (r100["t_baseline_s"], r100["t_method_s"], r100["speedup"]) == (240.0, 120.0, 2.0)
    assert r99["s_per_step_baseline"] == pytest.approx(2.0) and r99["s_per_step_method"] == pytest.approx(3.1)
    assert r99["generate_s_per_step_method"] == pytest.approx(1.6)
    assert r99["update_s_per_step_baseline"] == pytest.approx(1.1)
    for column in ["benchmark", "hardware", "design", "baseline", "method", "ci_low", "ci_high", "peak_method"]:
        assert column in table.columns
    only_two = analysis.summarize([{**study[0], "seeds": [0, 1]}], analysis.load_evals(runs), n_boot=10)
    assert set(only_two["n_seeds_baseline"]) == {2}


def test_study_file_errors_name_the_file_and_comparison(tmp_path):
    good = {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
            "method": "pods-max_variance-n16-m4"}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump([good]))
    assert analysis.load_study(path) == [good]
    path.write_text(yaml.safe_dump({"comparisons": [good, {**good, "design": "equal_time"}]}))
    with pytest.raises(ValueError, match=r"study.yaml: comparison 2: design 'equal_time'"):
        analysis.load_study(path)
    path.write_text(yaml.safe_dump([{k: v for k, v in good.items() if k != "baseline"}]))
    with pytest.raises(ValueError, match="comparison 1: missing key.*baseline"):
        analysis.load_study(path)
    path.write_text(yaml.safe_dump([{**good, "method": "pods-n16"}]))
    with pytest.raises(ValueError, match="comparison 1: method: method 'pods-n16'"):
        analysis.load_study(path)


def test_cli_analyze_writes_csv_and_markdown(tmp_path, capsys):
    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "grpo-n4-m4",
         "method": "pods-max_variance-n16-m4"},
        {"benchmark": "arith", "hardware": "cpu", "design": "equal_update", "baseline": "pods-max_variance-n16-m4",
         "method": "grpo-n4-m4"}]}))
    out = tmp_path / "tables" / "summary.csv"
    assert pods_main(["analyze", "--runs", str(tmp_path / "runs"), "--study", str(study), "--out", str(out),
                      "--n-boot", "20"]) == 0
    table = pd.read_csv(out)
    assert len(table) == 4 and table.loc[0, "speedup"] == 2.0
    assert pd.isna(table.loc[2, "speedup"])  # GRPO never reaches the PODS peak
    markdown = out.with_suffix(".md").read_text()
    assert markdown.startswith("| name | benchmark |") and "| main | arith |" in markdown
    assert "not reached" in markdown
    assert not list(out.parent.glob(".*tmp"))
    assert pods_main(["analyze", "--runs", str(tmp_path), "--study", str(tmp_path / "none.yaml")]) == 2
    assert "study file" in capsys.readouterr().err
