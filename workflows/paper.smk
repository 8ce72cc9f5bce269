# The paper's figures and speedup tables from the authors' released results (pods.paper).
#
#   snakemake --cores all paper_figures --config paper_results_dir=../shared/paper-results  # offline
#   snakemake --cores all paper_figures                                                     # downloads
#
# With `paper_results_dir` set, that local copy of the release's results/ folder is used as is;
# otherwise the release is downloaded at the pinned commit into {paper_work_dir}/release, each
# file checked against the sha256 in config/release_manifest.yaml. The release is imported into the
# run schema under {paper_work_dir}/runs, and our own analysis and plots write figures/paper/.
# Settings absent from a local copy (it may lack the Llama runs and the A100 exports) are drawn
# only if present and are reported as missing in speedups.csv / ablations.csv.
from pathlib import Path

import pods.paper.figures
import pods.paper.release

# the config was validated with the schema's defaults filled in (Snakefile)
PAPER_WORK = config["paper_work_dir"].rstrip("/")
PAPER_FIGURES_DIR = f"{config['figures_dir'].rstrip('/')}/paper"
# The tables (our summary of the authors' settings among them) are small and committed: the default
# study's decomposition and projection read them on machines without the release.
PAPER_TABLES_DIR = config["paper_tables_dir"].rstrip("/")
PAPER_MANIFEST = "config/release_manifest.yaml"
PAPER_LOCAL = config["paper_results_dir"]
PAPER_RELEASE = PAPER_LOCAL.rstrip("/") if PAPER_LOCAL else f"{PAPER_WORK}/release"
if PAPER_LOCAL and not Path(PAPER_LOCAL).is_dir():
    refuse(f"paper_results_dir: no folder {PAPER_LOCAL}")


def paper_figure_names():
    """Every figure for a download; for a local copy, those whose release files it holds."""
    if PAPER_LOCAL:
        return pods.paper.figures.available_figures(PAPER_LOCAL)
    return list(pods.paper.figures.PAPER_FIGURES)


def paper_figures_outputs():
    """Everything `rule paper_figures` must produce: figures (PNG + PDF) and CSV tables."""
    return [str(p) for p in pods.paper.figures.figure_outputs(PAPER_FIGURES_DIR, paper_figure_names(), PAPER_TABLES_DIR)]


def paper_release_files():
    if PAPER_LOCAL:
        present = [Path(PAPER_LOCAL) / name for name in pods.paper.release.release_files()]
        return [str(p) for p in present if p.exists()]
    return [f"{PAPER_RELEASE}/SHA256SUMS"]


rule paper_download:
    output:
        f"{PAPER_WORK}/release/SHA256SUMS",
    input:
        PAPER_MANIFEST,
    localrule: True
    log:
        f"{PAPER_WORK}/logs/download.log",
    shell:
        "pods paper download --dest {PAPER_WORK}/release --manifest {input} > {log} 2>&1"


rule paper_import:
    input:
        paper_release_files(),
    output:
        f"{PAPER_WORK}/import_report.json",
    localrule: True
    log:
        f"{PAPER_WORK}/logs/import.log",
    shell:
        "pods paper import --src {PAPER_RELEASE} --out {PAPER_WORK} > {log} 2>&1"


rule paper_outputs:
    input:
        f"{PAPER_WORK}/import_report.json",
    output:
        paper_figures_outputs(),
    params:
        figures=lambda wc: " ".join(["--figures", *paper_figure_names()]) if paper_figure_names() else "",
    localrule: True
    log:
        f"{PAPER_WORK}/logs/figures.log",
    shell:
        "pods paper figures --runs {PAPER_WORK} --out {PAPER_FIGURES_DIR} --tables {PAPER_TABLES_DIR} {params.figures} "
        "> {log} 2>&1 && cat {log}"
