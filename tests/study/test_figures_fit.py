"""Every figure of every committed study reads whole at its default size: drawn from the study's
committed results by the functions the workflow's `plots`, `project` and `verdict_views` rules call,
each title, axis label, tick label, annotation and legend lies inside the figure, and log axes
read plain numbers (2, 1.5) rather than powers of ten (2 x 10^0)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import matplotlib.text
import pandas as pd
import pytest
import yaml

from pods.study import analysis, calibration, plots, views
from pods.study.schema import load_study_config
from pods.study.tables import read_summary_table

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "config/config.yaml"


def committed_studies() -> list[Path]:
    """The study configs whose results and figures are committed (their study file and figures folder)."""
    found = []
    for path in sorted((REPO / "config").glob("*.yaml")):
        layer = yaml.safe_load(path.read_text()) or {}
        if path != DEFAULT and "results_dir" not in layer:
            continue  # a trainer or hardware file, or a study that writes into another's folders
        config = load_study_config(*dict.fromkeys([DEFAULT, path]))
        if (REPO / config["results_dir"] / "study.yaml").is_file() and (REPO / config["figures_dir"]).is_dir():
            found.append(path)
    return found


def tracked_pngs(folder: Path) -> list[Path]:
    """The PNG files under `folder` that git tracks (figures drawn locally, e.g. the paper's, are not);
    outside a git checkout (an unpacked source archive), every PNG there."""
    if not (REPO / ".git").exists():
        return sorted(folder.rglob("*.png"))
    listed = subprocess.run(["git", "ls-files", "--", str(folder)], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return [REPO / name for name in listed if name.endswith(".png")]


def drawn_texts(fig) -> list[matplotlib.text.Text | matplotlib.legend.Legend]:
    """What a draw of `fig` shows as text: the figure's texts and legends, and per visible axes its
    titles, axis labels, offset texts, the tick labels inside the view, annotations and legend."""
    out = [*fig.texts, *fig.legends]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
                ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text(), *ax.texts]
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = (high - low) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if low - slack <= tick.get_loc() <= high + slack:  # ticks outside the view are not drawn
                    out += [tick.label1, tick.label2]
        if ax.get_legend() is not None:
            out.append(ax.get_legend())
    blank = [isinstance(t, matplotlib.text.Text) and not t.get_text().strip() for t in out]
    return [t for t, empty in zip(out, blank) if t.get_visible() and not empty]


def problems(fig) -> list[str]:
    """Each drawn text that reaches past the figure's edge (at the saved 150 dpi, after the layout
    engine ran), and each tick label written as a power of ten."""
    fig.set_dpi(150)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    found = []
    for artist in drawn_texts(fig):
        extent = artist.get_window_extent(renderer)
        name = artist.get_text() if isinstance(artist, matplotlib.text.Text) else type(artist).__name__
        if extent.x0 < box.x0 - 1 or extent.y0 < box.y0 - 1 or extent.x1 > box.x1 + 1 or extent.y1 > box.y1 + 1:
            found.append(f"clipped: {name!r}")
        if "times10" in name.replace("\\", "") or "10^{" in name:
            found.append(f"power-of-ten tick: {name!r}")
    return found


@pytest.mark.parametrize("study_config", committed_studies(), ids=lambda p: p.stem)
def test_every_figure_of_a_committed_study_reads_whole(study_config, tmp_path, monkeypatch):
    config = load_study_config(*dict.fromkeys([DEFAULT, study_config]))
    results, figures = REPO / config["results_dir"], REPO / config["figures_dir"]
    checked: dict[str, list[str]] = {}

    def check(fig, stem):  # in place of writing the files: measure, then close
        checked[str(Path(stem).relative_to(tmp_path))] = problems(fig)
        plots.plt.close(fig)
        return []

    monkeypatch.setattr(plots, "save_figure", check)
    study = analysis.load_study(results / "study.yaml")
    summary = results / config["summary"]
    plots.draw_study_figures(study, results / "runs", tmp_path, read_summary_table(summary))
    # the verdict views' calibration is a table, not a figure: its minutes of simulation are not run here
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: pd.DataFrame({"endpoint": []}))
    monkeypatch.setattr(calibration, "report", lambda *args, **kwargs: "")
    monkeypatch.setattr(calibration, "calibration_markdown", lambda *args, **kwargs: "")
    views.verdict_views(results / "runs", results / "study.yaml", tmp_path, tmp_path,
                        studies=config["calibration"]["studies"], boot=config["calibration"]["boot"])
    paper = config["paper_summary"]
    views.project(summary, REPO / paper if paper else None, [REPO / f for f in config["cost_files"]], tmp_path,
                  tmp_path)

    # every committed figure of the study is among those checked, and every one checked is committed
    folders = {REPO / load_study_config(DEFAULT, path)["figures_dir"] for path in committed_studies()}
    others = {folder for folder in folders if figures in folder.parents}  # other studies' inside this one's
    committed = {str(p.relative_to(figures).with_suffix("")) for p in tracked_pngs(figures)
                 if not any(folder in p.parents for folder in others)}
    assert committed == set(checked)
    assert {stem: found for stem, found in checked.items() if found} == {}
