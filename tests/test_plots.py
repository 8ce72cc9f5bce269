"""pods.plots: figures as PNG + PDF from run metrics, one study figure per call."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from pods import analysis, plots
from pods.cli import main as pods_main
from test_analysis import make_study_runs

PNG = b"\x89PNG\r\n\x1a\n"


def _curve(values):
    t = np.arange(len(values)) * 60.0
    return analysis.curve_from_matrix(t, np.array([values, np.asarray(values) + 0.02]))


def test_curve_figure_writes_png_and_pdf_atomically(tmp_path):
    paths = plots.curve_figure({"GRPO (n=4, m=4)": _curve([0.1, 0.3, 0.5]),
                                "PODS max_variance (n=16, m=4)": _curve([0.1, 0.5, 0.6])},
                               tmp_path / "fig" / "acc", "Training Time (minutes)", "Test Accuracy (%)",
                               time_scale=60, bars={"GRPO (n=4, m=4)": 2.0, "PODS max_variance (n=16, m=4)": 3.1})
    assert [p.name for p in paths] == ["acc.png", "acc.pdf"]
    assert paths[0].read_bytes()[:8] == PNG and paths[1].read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["acc.pdf", "acc.png"]
    with pytest.raises(ValueError, match="no curves to plot"):
        plots.curve_figure({}, tmp_path / "empty", "x", "y")


def test_families_find_the_papers_ablations():
    methods = ["grpo-n16-m16", "pods-max_variance-n32-m16", "pods-max_variance-n64-m16", "pods-max_variance-n64-m8",
               "pods-max_variance-n64-m2", "pods-max_reward-n64-m16", "pods-random-n64-m16", "grpo-n64-m64"]
    fams = plots.families(methods)
    assert fams["n_scaling_m16"] == ["grpo-n16-m16", "pods-max_variance-n32-m16", "pods-max_variance-n64-m16"]
    assert fams["m_scaling_n64"] == ["pods-max_variance-n64-m16", "pods-max_variance-n64-m8", "pods-max_variance-n64-m2"]
    assert fams["rule_n64_m16"] == ["pods-max_reward-n64-m16", "pods-max_variance-n64-m16", "pods-random-n64-m16"]
    assert set(fams) == {"n_scaling_m16", "m_scaling_n64", "rule_n64_m16"}


def test_phase_table_splits_step_time_into_generation_update_and_the_rest(tmp_path):
    make_study_runs(tmp_path)
    table = plots.phase_table(analysis.load_steps(tmp_path))
    assert table.loc["grpo-n4-m4"].tolist() == pytest.approx([0.5, 1.1, 0.4])
    assert table.loc["pods-max_variance-n16-m4"].tolist() == pytest.approx([1.6, 1.0, 0.5])


@pytest.fixture
def study_dir(tmp_path):
    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
         "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "seeds": [0, 1, 2]}]}))
    return tmp_path, study


@pytest.mark.parametrize("kind, extra", [("accuracy", ["--design", "equal_update"]), ("length", []),
                                         ("step_time", [])])
def test_cli_plot_draws_one_study_figure(study_dir, kind, extra):
    root, study = study_dir
    stem = root / "figures" / "arith" / "cpu" / kind
    assert pods_main(["plot", kind, "--runs", str(root / "runs"), "--study", str(study), "--benchmark", "arith",
                      "--hardware", "cpu", "--out", str(stem), *extra]) == 0
    assert stem.with_suffix(".png").read_bytes()[:8] == PNG
    assert stem.with_suffix(".pdf").stat().st_size > 0


def test_cli_plot_refuses_figures_the_study_does_not_have(study_dir, capsys):
    root, study = study_dir
    assert pods_main(["plot", "rule", "--runs", str(root), "--study", str(study), "--benchmark", "arith",
                      "--hardware", "cpu", "--out", str(root / "x")]) == 2
    assert "no rule comparison for arith/cpu" in capsys.readouterr().err
    assert pods_main(["plot", "accuracy", "--runs", str(root), "--out", str(root / "x")]) == 2
    assert "needs --study, --benchmark and --hardware" in capsys.readouterr().err


def test_plot_all_draws_every_figure_of_the_runs(study_dir):
    root, _ = study_dir
    written = plots.plot_runs(root, root / "all")
    names = sorted(p.name for p in written)
    assert "accuracy_arith_cpu_arith.png" in names and "length_arith_cpu_arith.pdf" in names
    assert "n_scaling_m4_arith_cpu_arith.png" in names and "step_time_arith_cpu.png" in names


def test_study_figures_draw_only_the_seeds_their_comparisons_declare(study_dir, monkeypatch):
    """Studies share a runs folder (the ablations reuse 3 of the main study's 5 seeds): a figure
    must average exactly the seeds its table counts."""
    root, _ = study_dir
    study = [{"name": "rule", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
              "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4", "seeds": [0, 2]},
             {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
              "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4"}]
    assert plots.study_methods(study, "rule", "arith", "cpu") == {"grpo-n4-m4": {0, 2},
                                                                  "pods-max_variance-n16-m4": {0, 2}}
    assert plots.study_methods(study, "length", "arith", "cpu") == {"grpo-n4-m4": None,
                                                                    "pods-max_variance-n16-m4": None}
    drawn = {}
    monkeypatch.setattr(plots, "curve_figure", lambda curves, *a, **k: drawn.update(curves) or [])
    plots.plot_study_figure("rule", root, study, "arith", "cpu", root / "rule")
    assert {label: set(curve["n_seeds"]) for label, curve in drawn.items()} == {
        "GRPO (n=4, m=4)": {2}, "PODS max_variance (n=16, m=4)": {2}}
    plots.plot_study_figure("length", root, study, "arith", "cpu", root / "length")
    assert {label: set(curve["n_seeds"]) for label, curve in drawn.items()} == {
        "GRPO (n=4, m=4)": {3}, "PODS max_variance (n=16, m=4)": {3}}
