# Figures of the study, from run metrics only (pods.study.plots), each as PNG and PDF, each captioned in
# the report. Which figures exist follows from the comparisons: every `main` comparison gets an
# accuracy-vs-training-time figure per (benchmark, hardware, design); `n_scaling`, `m_scaling`
# and `rule` comparisons get their ablation figure; a comparison of any other name (the
# alternatives) gets one figure of all its arms per (benchmark, hardware, axis), named
# {name}-{axis}; every (benchmark, hardware) gets the
# completion-length curves and the seconds-per-step bars split by phase.

from pods.study.expansion import PLOT_KINDS
from pods.study.expansion import figure_panels as study_figure_panels

FIGURE = FIGURES + "/{benchmark}/{hardware}/{kind}{design}"  # pods.study.plots.FIGURE under FIGURES

def figure_panels():
    """(kind, benchmark, hardware, design suffix) of every figure of the study, in order."""
    return study_figure_panels(COMPARISONS)


def figure_files():
    return [
        FIGURE.format(kind=k, benchmark=b, hardware=h, design=d) + ext
        for k, b, h, d in figure_panels()
        for ext in (".png", ".pdf")
    ]


def figure_outputs():
    """Every PNG (in the report, with its kind's caption) and PDF of the study."""
    outputs = []
    for kind, benchmark, hardware, design in figure_panels():
        stem = FIGURE.format(kind=kind, benchmark=benchmark, hardware=hardware, design=design)
        caption = f"report/{kind}.rst" if kind in PLOT_KINDS else "report/family.rst"
        outputs.append(report(stem + ".png", caption=caption, category="Figures",
                              subcategory=f"{benchmark} / {hardware}"))
        outputs.append(stem + ".pdf")
    return outputs


# All figures in one job, drawn in-process with pods.study.plots (the functions behind `pods plot`):
# a study has a dozen figures and each `pods plot` process would spend far longer importing
# the package than drawing, which matters for `snakemake figures` on a 2-core machine.
# the runs are final once the tables are
derived("plots", lambda: {"study": STUDY_FILE, "summary": SUMMARY_CSV}, upstream=["study_file", "analyze"])


rule plots:
    input:
        unpack(lambda wc: by_content("plots")),
    output:
        figure_outputs(),
    localrule: True
    log:
        f"{LOGS}/plots.log",
    run:
        from pods.study import analysis, plots
        from pods.study.tables import read_summary_table

        study = analysis.load_study(input.study)
        summary = read_summary_table(input.summary)  # the accuracy figures mark its targets and crossings
        with open(log[0], "w") as fh:
            print(*plots.draw_study_figures(study, RUNS, FIGURES, summary), sep="\n", file=fh)
        write_stamp("plots")
