# Regenerates the paper's tables and figures: `snakemake --cores all` (embedded default, CPU),
# `--configfile config/paper.yaml` (paper scale, GPUs), `--profile workflow/profiles/slurm` (cluster).
# Wiring only: every step is a `tapernorm` command; logic lives in src/tapernorm (the run families:
# tapernorm.workflow, which plans without torch).

from snakemake.utils import min_version

from tapernorm.config import check_yaml_files

# 8.0 brings the executor plugins of workflow/profiles/slurm*; 8.15 is the first to plan a dry run
# (-n without --cores) of rules whose threads are workflow.cores (bench.smk)
min_version("8.15")


# Each config is complete: a --configfile replaces config/config.yaml instead of being merged over it
# (Snakemake's default would let every key it leaves out carry over from the CPU default, e.g. the
# CPU taper window into the paper grid). Several --configfile files still merge, in order.
# A YAML error in it is named with its line here (Snakemake's own message names none; for a
# --configfile, which Snakemake reads before this file, `tapernorm check-config FILE` names it).
if not workflow.overwrite_configfiles:
    check_yaml_files(["config/config.yaml"])

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# the optional families' rules only where the config has them (common.smk's PLAN says which)
if config["rehearsal"]:

    include: "workflow/rules/rehearsal.smk"


include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/fold.smk"
include: "workflow/rules/tails.smk"


if PLAN.sweep:

    include: "workflow/rules/sweep.smk"


if PLAN.finetune:

    include: "workflow/rules/finetune_params.smk"
    include: "workflow/rules/finetune.smk"
    include: "workflow/rules/export.smk"


if PLAN.bench:

    include: "workflow/rules/bench.smk"


if PLAN.lr_grid:

    include: "workflow/rules/lr_grid.smk"


if PLAN.scaling:

    include: "workflow/rules/scaling_params.smk"
    include: "workflow/rules/scaling.smk"


if PLAN.stability:

    include: "workflow/rules/stability.smk"


include: "workflow/rules/report.smk"


# the report's home page (snakemake --report): the run's verdicts once it has run, else a description
report: wp.REPORT_HOME if os.path.isfile(wp.REPORT_HOME) else "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        ALL_TARGETS,
