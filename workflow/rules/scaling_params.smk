# The scaling study's inputs and params (functions of a job's wildcards), for scaling.smk.
# Included when the config has `scaling`.
from tapernorm.cli.scaling import FIGURES as SCALING_FIGURES
from tapernorm.cli.scaling import SUMMARY_FILES as SCALING_SUMMARY_FILES
from tapernorm.workflow import scaling as wsc

# every record of the study (what the summary, figures and manifest read)
SCALING_RECORDS = wsc.study_records(PLAN.scaling, PLAN.scaling_ablation)


def scaling_record_source(wildcards):
    """The files of the run that a record copies: its own run, or the pretrain run standing for it."""
    run = wildcards.run
    if wildcards.sfamily == PLAN.scaling.name:
        family, run = PLAN.scaling.source(run)
    else:
        family = PLAN.scaling_ablation.name
    return [f"{run_dir(family, run)}/{f}" for f in wsc.RECORD_FILES]
