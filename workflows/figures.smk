# Figures of the study, from run metrics only (pods.plots), each as PNG and PDF, each captioned in
# the report. Which figures exist follows from the comparisons: every `main` comparison gets an
# accuracy-vs-training-time figure per (benchmark, hardware, design); `n_scaling`, `m_scaling`
# and `rule` comparisons get their ablation figure; every (benchmark, hardware) gets the
# completion-length curves and the seconds-per-step bars split by phase.

ABLATIONS = ("n_scaling", "m_scaling", "rule")
FIGURE = FIGURES + "/{benchmark}/{hardware}/{kind}{design}"

wildcard_constraints:
    design=r"(-equal_update|-equal_generation)?",


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


# One rule per figure kind, so that each kind carries its own caption file in the report.
for _kind in ("accuracy", *ABLATIONS, "length", "step_time"):
    _figure = FIGURE.replace("{kind}", _kind)

    rule:
        name:
            f"plot_{_kind}"
        input:
            study=STUDY_FILE,
            summary=SUMMARY_CSV,  # the runs are final once the tables are
        output:
            png=report(_figure + ".png", caption=f"report/{_kind}.rst", category="Figures",
                       subcategory="{benchmark} / {hardware}"),
            pdf=_figure + ".pdf",
        params:
            kind=_kind,
            runs=RUNS,
            design=lambda wc: f"--design {wc.design[1:]}" if wc.design else "",
            prefix=lambda wc, output: output.png[: -len(".png")],
        localrule: True
        log:
            f"{LOGS}/plot/{{benchmark}}/{{hardware}}/{_kind}{{design}}.log",
        shell:
            "pods plot {params.kind} --runs {params.runs} --study {input.study} "
            "--benchmark {wildcards.benchmark} --hardware {wildcards.hardware} {params.design} "
            "--out {params.prefix} > {log} 2>&1"
