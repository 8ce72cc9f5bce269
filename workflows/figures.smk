# Figures of the study, from run metrics only (pods.plots), each as PNG and PDF, each captioned in
# the report. Which figures exist follows from the comparisons: every `main` comparison gets an
# accuracy-vs-training-time figure per (benchmark, hardware, design); `n_scaling`, `m_scaling`
# and `rule` comparisons get their ablation figure; every (benchmark, hardware) gets the
# completion-length curves and the seconds-per-step bars split by phase.

ABLATIONS = ("n_scaling", "m_scaling", "rule")
FIGURE = FIGURES + "/{benchmark}/{hardware}/{kind}{design}"

def figure_panels():
    """(kind, benchmark, hardware, design suffix) of every figure of the study, in order."""
    panels = []
    for row in COMPARISONS:
        if row["name"] == "main":
            panels.append(("accuracy", row["benchmark"], row["hardware"], "-" + row["design"]))
        elif row["name"] in ABLATIONS:
            panels.append((row["name"], row["benchmark"], row["hardware"], ""))
        panels += [(kind, row["benchmark"], row["hardware"], "") for kind in ("length", "step_time")]
    return list(dict.fromkeys(panels))


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
        outputs.append(report(stem + ".png", caption=f"report/{kind}.rst", category="Figures",
                              subcategory=f"{benchmark} / {hardware}"))
        outputs.append(stem + ".pdf")
    return outputs


# All figures in one job, drawn in-process with pods.plots (the functions behind `pods plot`):
# a study has a dozen figures and each `pods plot` process would spend far longer importing
# the package than drawing, which matters for `snakemake figures` on a 2-core machine.
rule plots:
    input:
        study=STUDY_FILE,
        summary=SUMMARY_CSV,  # the runs are final once the tables are
    output:
        figure_outputs(),
    localrule: True
    log:
        f"{LOGS}/plots.log",
    run:
        from pods import analysis, plots

        study = analysis.load_study(input.study)
        summary = analysis.read_summary(input.summary)  # the accuracy figures mark its targets and crossings
        with open(log[0], "w") as fh:
            for kind, benchmark, hardware, design in figure_panels():
                stem = FIGURE.format(kind=kind, benchmark=benchmark, hardware=hardware, design=design)
                written = plots.plot_study_figure(kind, RUNS, study, benchmark, hardware, stem,
                                                  design=design[1:] or None, summary=summary)
                print(*written, sep="\n", file=fh)
