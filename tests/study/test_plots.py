"""pods.study.plots: figures as PNG + PDF from run metrics, one study figure per call."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from helpers import make_study_runs
from pods.cli import main as pods_main
from pods.study import analysis, plots
from pods.study.curves import curve_from_matrix, load_runs, load_steps

PNG = b"\x89PNG\r\n\x1a\n"


def _curve(values):
    t = np.arange(len(values)) * 60.0
    return curve_from_matrix(t, np.array([values, np.asarray(values) + 0.02]))


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
    assert fams["m_scaling_n64"] == ["pods-max_variance-n64-m16", "pods-max_variance-n64-m8",
                                     "pods-max_variance-n64-m2"]
    assert fams["rule_n64_m16"] == ["pods-max_reward-n64-m16", "pods-max_variance-n64-m16", "pods-random-n64-m16"]
    assert set(fams) == {"n_scaling_m16", "m_scaling_n64", "rule_n64_m16"}


def test_phase_table_splits_step_time_into_generation_update_and_the_rest(tmp_path):
    make_study_runs(tmp_path)
    table = plots.phase_table(load_steps(tmp_path))
    assert table.loc["grpo-n4-m4"].tolist() == pytest.approx([0.5, 1.1, 0.4])
    assert table.loc["pods-max_variance-n16-m4"].tolist() == pytest.approx([1.6, 1.0, 0.5])


@pytest.fixture
def study_dir(tmp_path):
    make_study_runs(tmp_path)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"comparisons": [
        {"name": "main", "benchmark": "arith", "hardware": "cpu", "design": "equal_update", "align": "nearest",
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


# --------------------------------------------------------------------------------------------
# What the figures show: read back from the drawn axes, against the runs' own numbers
# --------------------------------------------------------------------------------------------
def drawn_figures(monkeypatch) -> list:
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, stem: figures.append(fig) or [])
    return figures


def test_accuracy_figure_draws_the_runs_curves_and_the_summary_targets(study_dir, monkeypatch):
    root, study_file = study_dir
    study = analysis.load_study(study_file)
    tables = load_runs(root)
    summary = analysis.summarize_study(study, tables.evals, tables.steps, n_boot=200, power=False)
    figures = drawn_figures(monkeypatch)
    plots.plot_study_figure("accuracy", root, study, "arith", "cpu", root / "acc", design="equal_update",
                            summary=summary)
    (fig,) = figures
    ax = fig.axes[0]
    assert ax.get_title() == "arith on cpu, equal update"
    assert ax.get_ylabel() == "Test Accuracy (%)" and ax.get_xlabel().startswith("Training Time on cpu (")
    lines = {line.get_label(): line for line in ax.get_lines()}
    grpo, pods = lines["GRPO (n=4, m=4)"], lines["PODS max_variance (n=16, m=4)"]
    # make_study_runs: every seed starts at 0.1 (the base model at t = 0); GRPO ends at 0.60-0.62
    # (mean 0.61) and PODS at 0.66, in percent, and PODS is ahead at every later point
    assert grpo.get_ydata()[0] == pytest.approx(10) and pods.get_ydata()[0] == pytest.approx(10)
    assert grpo.get_xdata()[0] == 0 and list(grpo.get_xdata()) == list(pods.get_xdata())
    assert max(grpo.get_ydata()) == pytest.approx(61) and max(pods.get_ydata()) == pytest.approx(66)
    assert all(p >= g for g, p in zip(grpo.get_ydata()[1:], pods.get_ydata()[1:]))
    # the paper rule's target line at 99% of GRPO's peak, as in the summary table
    paper = next(line for label, line in lines.items() if label.startswith("target, paper rule"))
    paper_row = (summary["target_rule"] == "paper") & (summary["target"] == "0.99")
    target = float(summary[paper_row]["target_accuracy"].iloc[0])
    assert list(paper.get_ydata()) == pytest.approx([100 * target] * 2) and target == pytest.approx(0.99 * 0.61)
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert {"GRPO (n=4, m=4)", "PODS max_variance (n=16, m=4)"} <= set(legend)


def test_step_time_figure_stacks_the_measured_phases(study_dir, monkeypatch):
    root, study_file = study_dir
    figures = drawn_figures(monkeypatch)
    plots.plot_study_figure("step_time", root, analysis.load_study(study_file), "arith", "cpu", root / "steps")
    (fig,) = figures
    ax = fig.axes[0]
    assert ax.get_ylabel() == "Seconds per Training Step"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["GRPO\n(n=4, m=4)", "PODS max_variance\n(n=16, m=4)"]
    heights = {c.get_label(): [bar.get_height() for bar in c] for c in ax.containers}
    # the steps of make_study_runs: GRPO generate 0.5, update 1.0 and 1.2, 2.0 s in all; PODS 1.5-1.7, 1.0, 3.0-3.2
    assert heights["generate"] == pytest.approx([0.5, 1.6])
    assert heights["update"] == pytest.approx([1.1, 1.0])
    assert heights["other"] == pytest.approx([0.4, 0.5])


def test_a_named_family_draws_all_its_arms_on_its_axis(study_dir, monkeypatch):
    """Comparisons of any other name (the alternatives) get one figure of all their arms per axis;
    on the step axis the x values are the evaluations' optimiser steps."""
    root, _ = study_dir
    pair = {"name": "alternatives", "benchmark": "arith", "hardware": "cpu", "design": "equal_update",
            "baseline": "grpo-n4-m4", "method": "pods-max_variance-n16-m4"}
    study = [pair, {**pair, "axis": "step"}]
    assert plots.study_methods(study, "alternatives", "arith", "cpu", axis="step") == {
        "grpo-n4-m4": None, "pods-max_variance-n16-m4": None}
    figures = drawn_figures(monkeypatch)
    plots.plot_study_figure("alternatives", root, study, "arith", "cpu", root / "alt-step", axis="step")
    plots.plot_study_figure("alternatives", root, study, "arith", "cpu", root / "alt-time")
    steps, time = (fig.axes[0] for fig in figures)
    assert steps.get_xlabel() == "Optimiser Steps" and steps.get_title() == "arith on cpu: alternatives, by step"
    assert time.get_xlabel().startswith("Training Time on cpu (") and time.get_title() == "arith on cpu: alternatives"
    lines = {line.get_label(): line for line in steps.get_lines()}
    # make_study_runs logs an evaluation every 10 steps: 0, 10, ... 40
    assert list(lines["GRPO (n=4, m=4)"].get_xdata()) == [0, 10, 20, 30, 40]
    with pytest.raises(ValueError, match="no alternatives comparison"):
        plots.plot_study_figure("alternatives", root, [pair], "arith", "cpu", root / "x", axis="step")


def test_the_arms_figure_places_each_arm_against_the_first_baseline_at_its_cost_and_learning_per_step(monkeypatch):
    """plots.arms_figure: one point per arm against the study's first baseline (not the head-to-head
    rows), at x = its cost per step and y = its gain profile by steps, each with its interval; a
    study with one arm per baseline (the default study) has no such figure (tables.field_arms)."""
    import pandas as pd

    from pods.study.tables import draws_arms, field_arms, field_points

    def rows(baseline, method, bench, speedup, per_step, cost):
        keys = {"name": "field", "benchmark": bench, "hardware": "cpu", "design": "equal_update",
                "baseline": baseline, "method": method}
        a = {"endpoint": "gain_profile", "estimate": speedup, "ci_low": speedup / 2, "ci_high": speedup * 2,
             "verdict_adjusted": "undecided", "step_cost_ratio": cost, "step_cost_ratio_ci_low": cost * 0.9,
             "step_cost_ratio_ci_high": cost * 1.1}
        b = {"endpoint": "mean_accuracy", "estimate": 0.01, "ci_low": 0.0, "ci_high": 0.02,
             "verdict_adjusted": "higher"}
        step = {"endpoint": "gain_profile", "estimate": per_step, "ci_low": per_step / 3, "ci_high": per_step * 3}
        return [{**keys, "axis": "cost", **a}, {**keys, "axis": "cost", **b}, {**keys, "axis": "step", **step}]

    summary = pd.DataFrame(rows("grpo-n16-m16", "pods-max_variance-n64-m16", "arith", 1.5, 2.4, 1.6)
                           + rows("grpo-n16-m16", "cppo-n16-m4", "arith", 2.5, 4.5, 1.8)
                           + rows("cppo-n16-m4", "pods-max_variance-n64-m16", "arith", 0.6, 0.5, 0.9))
    points = field_points(summary)
    assert list(points["per_step"]) == [2.4, 4.5, 0.5] and list(points["cost"]) == [1.6, 1.8, 0.9]
    assert field_arms(points.to_dict("records")) == ("grpo-n16-m16", ["pods-max_variance-n64-m16", "cppo-n16-m4"])
    assert draws_arms(points.to_dict("records"))
    assert field_arms([{"baseline": "grpo-n16-m16", "method": "pods-max_variance-n64-m16"},
                       {"baseline": "grpo-n64-m64", "method": "pods-max_variance-n64-m16"}])[1] == [
        "pods-max_variance-n64-m16"]
    figures = drawn_figures(monkeypatch)
    plots.arms_figure(points, "arms")
    ax = figures[0].axes[0]
    drawn = sorted((float(c.lines[0].get_xdata()[0]), float(c.lines[0].get_ydata()[0])) for c in ax.containers)
    assert drawn == [(1.6, 2.4), (1.8, 4.5)]       # the arms, not PODS against CPPO
    import matplotlib.legend

    legends = [*figures[0].legends, *(c for c in ax.get_children() if isinstance(c, matplotlib.legend.Legend))]
    labels = {t.get_text() for legend in legends for t in legend.get_texts()}
    assert {"PODS max_variance (n=64, m=16)", "CPPO (n=16, k=4)", "arith", "break-even (speedup 1)"} <= labels
    # a study whose arms never reached the baseline's levels (the smoke study) still gets its figure, saying so
    plots.arms_figure(points.assign(per_step=float("nan")), "arms")
    assert "none reached the baseline's levels" in figures[-1].axes[0].texts[0].get_text()
