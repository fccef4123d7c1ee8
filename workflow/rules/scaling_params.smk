# The scaling study's inputs and params (functions of a job's wildcards), for scaling.smk.
# Included when the config has `scaling`.
from tapernorm.cli.scaling import FIGURES as SCALING_FIGURES
from tapernorm.cli.scaling import SUMMARY_FILES as SCALING_SUMMARY_FILES
from tapernorm.workflow import scaling as wsc

# every record of the study (what the summary, figures and manifest read)
SCALING_RECORDS = wsc.study_records(PLAN.scaling, PLAN.scaling_ablation)
# the committed stability study's runs of a cell's recipe, which its rows take too
SCALING_EXTRA_RECORDS = wsc.extra_records(PLAN.scaling)


def scaling_record_run(wildcards):
    """The run directory a record copies: its own run, or the pretrain run standing for it."""
    family, run = wsc.record_source(
        PLAN.scaling, PLAN.pretrain, PLAN.family(wildcards.sfamily), wildcards.run
    )
    return run_dir(family.name, run)


def scaling_record_source(wildcards):
    """That run's files, or nothing for a complete record of today's config: wsc.record_inputs."""
    return wsc.record_inputs(
        PLAN.scaling, PLAN.pretrain, PLAN.family(wildcards.sfamily), wildcards.run
    )
