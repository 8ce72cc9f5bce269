# PODS reproduction workflow.
#
#   snakemake --cores all reproduce         train the study in config/config.yaml, then tables + figures
#   snakemake --cores all figures           tables + figures from the runs already in results/ (no training)
#   snakemake --cores all paper_figures     the paper's figures from the authors' released results
#   snakemake --report report.html          every figure, captioned
#
# Other studies layer a config over the default: --configfile config/{smoke,ablations,alternatives,large,paper,smollm2}.yaml
import os
from pathlib import Path

from snakemake.utils import min_version, update_config

from pods.study.schema import load_schema, refuse, refused_in_one_line, typed_command_line, validate

min_version("8.0")


# The study protocol first (trainer, kernels, clock, step costs, budget: every study layers over it),
# then the default study; --configfile layers go on top.
configfile: "config/protocol.yaml"
configfile: "config/config.yaml"


# `--config seeds=[0,1]` arrives as ['0', '1'] (Snakemake reads list and mapping items given on the
# command line as strings): read them as YAML does before the schema checks their types.
update_config(config, typed_command_line(dict(workflow.config_settings.config)))

# config/schema.yaml, its registry-defined name lists filled in (read once: the study model in
# workflows/common.smk checks hardware profiles with it too); defaults fill in as Snakemake's own
# validate(set_default=True) does
STUDY_SCHEMA = load_schema(Path(workflow.basedir, "config", "schema.yaml"))
# a study config that cannot run stops here, or in workflows/common.smk, in the package's one line
with refused_in_one_line():
    validate(config, STUDY_SCHEMA, "config")

# Every job this workflow starts (locally or, parsing this file again, on a cluster node) inherits
# the pinned CPU kernel path: see `aten_cpu_capability` in config/schema.yaml.
if config.get("aten_cpu_capability"):
    os.environ["ATEN_CPU_CAPABILITY"] = config["aten_cpu_capability"]


report: "workflows/report/workflow.rst"


include: "workflows/common.smk"
include: "workflows/data.smk"
include: "workflows/train.smk"
include: "workflows/analysis.smk"
include: "workflows/figures.smk"
include: "workflows/paper.smk"
include: "workflows/smollm2.smk"
include: "workflows/confirm.smk"


# Both targets end with the study's bottom line on stdout (a rule with no output runs every time).
rule reproduce:
    input:
        SUMMARY_CSV,
        SUMMARY_MD,
        figure_files(),
        PROJECTION_FILES,
        PROJECTION_FIGURES,
        VERDICT_VIEW_FILES,
        VERDICT_VIEW_FIGURES,
    default_target: True
    localrule: True
    run:
        print_bottom_line()


rule figures:
    input:
        lambda wc: cached_results(),
    localrule: True
    run:
        print_bottom_line()


rule paper_figures:
    input:
        paper_figures_outputs(),
