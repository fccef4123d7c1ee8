import json
import os
import sys

from tapernorm.runtime import provenance
from tapernorm.analysis.runs import ANALYSIS_INPUTS
from tapernorm.workflow.outputs import BY_NAME as OUTPUTS
from tapernorm.machine.env_lock import CONSTRAINTS, environment_warning
from tapernorm.machine.job_resources import hf_cache_env
from tapernorm.training.lock import WAIT_ENV
from tapernorm.workflow import check_config_files, validated_plan
from tapernorm.workflow import files as wf
from tapernorm.workflow import job_functions as jf
from tapernorm.workflow import names as wn
from tapernorm.workflow import bench as wb
from tapernorm.workflow import plan as wp
from tapernorm.workflow import priorities
from tapernorm.workflow.family import family_dirs
from tapernorm.workflow.files import FINETUNE_DATA, FINETUNE_DATA_FILES
from tapernorm.workflow.job_functions import (
    bench_pool_input,
    dirs_of,
    gpu_claim,
    gpu_input,
    input_dir,
    job_records_dir,
    optional_files,
    output_dir,
    run_dirs,
    scaling_input,
    stability_input,
    table_stem,
)
from tapernorm.workflow.names import model_files, run_dir
from tapernorm.workflow.trunks import trunk_dir, trunk_files
from tapernorm.workflow.stamps import rerun_command, stamp_options, stamp_param

CONFIG_SCHEMA = f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
# Snakemake's YAML loader keeps the last of two equal keys: reject them (and name the line); a
# target written after --configfile, which Snakemake reads as a config file, is named as such.
check_config_files(workflow.configfiles, CONFIG_SCHEMA)
# Validate (and complete with defaults) before any job runs; errors name the offending key. The
# plan: the families of this config (None: left out), every training run's config resolved once,
# and what the workflow builds from them
PLAN = validated_plan(config, CONFIG_SCHEMA)
config.update(PLAN.config)
# A train job whose run another invocation is writing waits for it instead of failing (Snakemake
# deletes a failed job's outputs: the running job's); docs/usage.md, "Rerunning a run".
os.environ.setdefault(WAIT_ENV, "1")
# Hugging Face's caches (hub models, datasets) in data/hf_home unless HF_HOME or a cache variable
# is set (docs/usage.md, "Data"); the jobs inherit it, on a cluster too (sbatch --export=ALL)
os.environ.update(hf_cache_env(os.environ, os.getcwd()))
# the validated config's sha256 (config_sha256, with the schema's defaults filled in), named in
# every table's, figure's and the claims' provenance stamp
CONFIG_HASH = provenance.config_hash(config)
# config_file_sha256: the sha256 of the bytes of each config file given, read now (the manifest's)
CONFIG_FILE_HASHES = provenance.config_file_hashes(workflow.configfiles)
# the installed versions against the committed lock (one line naming each that differs)
ENV_WARNING = environment_warning(f"{workflow.basedir}/{CONSTRAINTS}")
if ENV_WARNING:
    print(f"tapernorm: warning: {ENV_WARNING}", file=sys.stderr)


# results from code that differs from its commit: refused in one line before the first job (not on
# a dry run), unless TAPERNORM_ALLOW_DIRTY=1, which the jobs inherit (docs/reproducibility.md)
onstart:
    try:
        provenance.refuse_dirty_code()
    except provenance.DirtyCodeError as e:
        sys.exit(f"tapernorm: error: {e}")


# the stamp options of every table, figure, the claims and job times (a params function of the
# output, stamp_param: not a rerun trigger); a rehearsal says so in each
STAMP_ARGS = stamp_options(CONFIG_HASH, bool(config["rehearsal"]))
stamp_args = stamp_param(STAMP_ARGS)
# what reruns this run (the report's home page names it)
RERUN_COMMAND = rerun_command(
    workflow.configfiles if workflow.overwrite_configfiles else ()
)
PRETRAIN_DATA_FILES = wf.pretrain_data_files(config)
# a rehearsal's stand-ins of the external inputs (made by rehearsal_inputs): what the data and
# fine-tuning rules wait for; nothing in a real run
REHEARSAL_INPUTS = wf.rehearsal_inputs(config)
# the conda env (--sdm conda) of the rules that may hold a GPU: CUDA torch when the config uses one
GPU_ENV = PLAN.gpu_rules_env()
FIGURES = PLAN.figure_runs()  # the run directories each figure of this config plots
# every run rule train trains, one row each, its config resolved once, now (workflow.sheet;
# `tapernorm runs-sheet [--configfile FILE ...]` prints it): rule train's and rule trunk's params
# and resources read the run's row
TRAIN = jf.TrainJobs(PLAN)
# threads of a benchmark or data preparation
all_cores = jf.all_cores(workflow)
# the committed LR grid, the working directory's or else the checkout's
lr_grid_input = jf.lr_grid_input(workflow.basedir)
# every default target (the all rule's input), the LR grid's figure where the checkout has the grid
LR_GRID_DRAWN = bool(lr_grid_input(None))
ALL_TARGETS = PLAN.all_targets(lr_grid=LR_GRID_DRAWN)


wildcard_constraints:
    family="|".join(f.name for f in PLAN.training()),
    run=wn.RUN_WILDCARD,


def run_files(run_dirs, names=ANALYSIS_INPUTS):
    """The files `names` (default: all that the analysis reads) of a list of run directories."""
    return wf.run_files(run_dirs, names)


def table_outputs(name):
    """results/tables/<name>.{csv,md,tex} and the .html that the report shows, captioned by
    workflow/report/<name>.rst, and the set's marker (.set.json: written as one set). `name`:
    an output of the registry (workflow/outputs.py), which `tapernorm make` builds."""
    files = wp.table_files(OUTPUTS[name].name)
    marker = wf.set_marker(files["csv"].removesuffix(".csv"))
    return {**wf.with_report(files, name, "Tables", report), "marker": marker}


def figure_outputs(name):
    """figures/<name>.{pdf,png} and the report's .html, and the set's marker (.set.json), of the
    registry's output `name`."""
    files = wf.figure_files(OUTPUTS[name].name)
    marker = wf.set_marker(files["pdf"].removesuffix(".pdf"))
    return {**wf.with_report(files, name, "Figures", report), "marker": marker}


def manifest_files(wildcards):
    """Every file of the run that the manifest hashes (Plan.manifest_inputs)."""
    return PLAN.manifest_inputs(ANALYSIS_INPUTS, lr_grid=LR_GRID_DRAWN)
