# The scaling study's inputs and params (functions of a job's wildcards), for scaling.smk.
# Included when the config has `scaling`.
from tapernorm.cli.scaling import FIGURES as SCALING_FIGURES
from tapernorm.cli.scaling import SUMMARY_FILES as SCALING_SUMMARY_FILES
from tapernorm.workflow import scaling as wsc

# every record of the study (what the summary, figures and manifest read)
SCALING_RECORDS = wsc.study_records(PLAN.scaling, PLAN.scaling_ablation)


def scaling_record_run(wildcards):
    """The run directory a record copies: its own run, or the pretrain run standing for it."""
    run = wildcards.run
    if wildcards.sfamily == PLAN.scaling.name:
        family, run = PLAN.scaling.source(run)
    else:
        family = PLAN.scaling_ablation.name
    return run_dir(family, run)


def scaling_record_source(wildcards):
    """That run's files, or nothing for a complete (committed) record: wsc.record_inputs."""
    record = wsc.record_dir(wildcards.sfamily, wildcards.run)
    return wsc.record_inputs(record, scaling_record_run(wildcards))
