"""The workflow layer: what the Snakefile asks of a pipeline config: its run families, each a
function of the config returning its rows (workflow.family.Family: each run's name and the recipe
of its config; pre-training and the ablation, anchor_sweep, lr_grid in workflow.training, the
scaling and stability studies, finetune and finetune_base; workflow.plan.Plan holds them, the
sheet in workflow.sheet shows their runs), the registry of its outputs, each table and figure once
with its rule, builder and caption (workflow.outputs, which the plan's targets and the rules read),
the files the rules name (workflow.files), the functions Snakemake calls for each job
(workflow.job_functions) and the outputs' stamps (workflow.stamps); the .smk files only wire them
up. Plans without torch: the planning host decides no device (workflow.devices)."""

from .plan import Plan
from .validate import (
    check_config_files,
    merged_configs,
    read_config_files,
    validate_pipeline_config,
    validated_plan,
)

__all__ = [
    "Plan",
    "check_config_files",
    "merged_configs",
    "read_config_files",
    "validate_pipeline_config",
    "validated_plan",
]
