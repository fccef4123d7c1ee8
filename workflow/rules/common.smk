import json
import os
import sys

from tapernorm import provenance
from tapernorm.analysis.runs import ANALYSIS_INPUTS
from tapernorm.env_lock import CONSTRAINTS, environment_warning
from tapernorm.job_resources import hf_cache_env
from tapernorm.run_identity import MODEL_FILES
from tapernorm.run_lock import WAIT_ENV
from tapernorm.workflow import Plan, check_config_files, validate_pipeline_config
from tapernorm.workflow import names as wn
from tapernorm.workflow import bench as wb
from tapernorm.workflow import plan as wp
from tapernorm.workflow.devices import gpu_prefix

CONFIG_SCHEMA = f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
# Snakemake's YAML loader keeps the last of two equal keys: reject them (and name the line); a
# target written after --configfile, which Snakemake reads as a config file, is named as such.
check_config_files(workflow.configfiles, CONFIG_SCHEMA)
# Validate (and complete with defaults) before any job runs; errors name the offending key.
config.update(validate_pipeline_config(config, CONFIG_SCHEMA))
# The families of this config (None: left out) and what the workflow builds from them
PLAN = Plan(config)
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
# the stamp arguments of every table, figure, the claims and job times: a rehearsal says so in each
STAMP_ARGS = f"--config-hash {CONFIG_HASH}" + (
    " --rehearsal" if config["rehearsal"] else ""
)
# the committed LR grid (docs/norm-free.md): the claims use it where its scale is the runs'
LR_GRID = "results/cpu/lr_grid/lr_grid.json"
# the committed scaling study (docs/scaling.md): the claims quote each claim as training grows
SCALING_SUMMARY = "results/cpu/scaling/summary.csv"
# the committed first-GPU checks (benchmarks/README.md): claim 7 quotes the newest
GPU_CHECKS = "results/gpu"
# what reruns this run (the report's home page names it)
RERUN_COMMAND = "snakemake --cores all" + (
    f" --configfile {' '.join(os.path.relpath(f) for f in workflow.configfiles)}"
    if workflow.overwrite_configfiles
    else ""
)

PRETRAIN_DATA = "data/pretrain"
# a rehearsal's stand-ins of the external inputs (made by rehearsal_inputs): what the data and
# fine-tuning rules wait for; nothing in a real run
REHEARSAL_INPUTS = (
    [f"{config['rehearsal']['inputs']}/standins.json"] if config["rehearsal"] else []
)
# the conda env (--sdm conda) of the rules that may hold a GPU: CUDA torch when the config uses one
GPU_ENV = PLAN.gpu_rules_env()
JOB_RECORDS = wn.JOB_RECORDS
FIG_WIDTH = PLAN.pretrain.figure_width


wildcard_constraints:
    family="|".join(f.name for f in PLAN.training()),
    run=wn.RUN_WILDCARD,


def data_files(root, sentencepiece):
    """What `tapernorm prepare-data` writes to `root` that its readers open: the shards, their meta
    and (SentencePiece) the tokenizer model."""
    files = {f: f"{root}/{f}.bin" for f in ("train", "val")} | {
        "meta": f"{root}/meta.json"
    }
    if sentencepiece:
        files["tokenizer"] = f"{root}/tokenizer.model"
    return files


PRETRAIN_DATA_FILES = data_files(
    PRETRAIN_DATA, config["data"]["tokenizer"] == "sentencepiece"
)
# the GPT-2 fine-tuning family's token shards (GPT-2 BPE; made by prepare_finetune_data)
FINETUNE_DATA = "data/finetune"
FINETUNE_DATA_FILES = data_files(FINETUNE_DATA, sentencepiece=False)


# ---- run directories and table outputs: the one helper of each that every rule uses --------------


def run_dir(family, run):
    """results/runs/<family>/<run> (a run's directory; wildcards pass through as they are)."""
    return wn.run_dir(family, run)


def model_files(run, prefix=""):
    """{name: path} of what loading the model of run directory `run` reads (config, weights)."""
    return {f"{prefix}{f.split('.')[0]}": f"{run}/{f}" for f in MODEL_FILES}


def run_files(run_dirs, names=ANALYSIS_INPUTS):
    """The files `names` (default: all that the analysis reads) of a list of run directories."""
    return [f"{d}/{f}" for d in run_dirs for f in names]


def table_outputs(name):
    """The outputs of a table command: results/tables/<name>.{csv,md,tex} and the .html that the
    report shows with its caption, workflow/report/<name>.rst."""
    files = wp.table_files(name)
    files["html"] = report(
        files["html"], caption=f"../report/{name}.rst", category="Tables"
    )
    return files


def figure_outputs(name):
    """The outputs of a figure command: figures/<name>.{pdf,png} and the report's .html."""
    return {
        "pdf": f"figures/{name}.pdf",
        "png": f"figures/{name}.png",
        "html": report(
            f"figures/{name}.html", caption=f"../report/{name}.rst", category="Figures"
        ),
    }


def pretrain_dirs(width=None, variants=None):
    names = PLAN.pretrain.runs(width)
    if variants is not None:
        names = [n for n in names if wn.parse_run_name(n)[0] in variants]
    return PLAN.pretrain.run_dirs(names)


def family_dirs(family):
    """Run directories of an optional family (none when the config leaves it out)."""
    return family.run_dirs() if family else []


FIGURE_RUNS = {  # the run directories each figure plots
    "fig1_gate_schedule": pretrain_dirs(FIG_WIDTH, ["internal_aux"])[:1],
    "fig2_train_loss": pretrain_dirs(FIG_WIDTH, wp.FIG2_VARIANTS),
    "fig3_logit_norm": pretrain_dirs(FIG_WIDTH),
    "fig4_grad_norms": pretrain_dirs(FIG_WIDTH),
    "fig4b_ablation_grad_norms": family_dirs(PLAN.ablation),
    "fig6_scale_anchor": family_dirs(PLAN.ablation),
    "fig7_anchor_sweep": family_dirs(PLAN.ablation) + family_dirs(PLAN.sweep),
}
FIGURES = {name: FIGURE_RUNS[name] for name in PLAN.figures()}  # this config's


# ---- params, threads and resources: named functions of a job's wildcards (and input/output) ----------


def input_dir(key):
    """A params function: the directory of the job's input `key` (a run, a data set)."""

    def param(wildcards, input):
        return os.path.dirname(getattr(input, key))

    return param


def output_dir(key):
    """A params function: the directory of the job's output `key` (where its command writes)."""

    def param(wildcards, output):
        return os.path.dirname(getattr(output, key))

    return param


def dirs_of(paths):
    """Run directories of a list of files inside them, in order, each once (for --runs)."""
    return " ".join(dict.fromkeys(p.rsplit("/", 1)[0] for p in paths))


def run_dirs(wildcards, input):
    """--runs: the run directories of the job's input `runs`."""
    return dirs_of(input.runs)


def table_stem(wildcards, output):
    """--out of a table command: its outputs' path without the extension."""
    return output.csv.removesuffix(".csv")


def optional_files(option, key, join=" ".join):
    """A params function: `option FILES` of the job's input `key` (FILES: join(files)), or ""
    when that input is empty (the claims' optional families)."""

    def param(wildcards, input):
        files = getattr(input, key)
        return f"{option} {join(files)}" if files else ""

    return param


def gpu_claim(device, ranks=lambda wildcards: 1):
    """A params function: the `tapernorm gpus` prefix that gives the job the GPUs it holds
    (resources.gpu, as Snakemake granted it) on a workstation, for a command on device(wildcards)
    of ranks(wildcards) processes; "" for a job that holds none."""

    def param(wildcards, resources):
        return gpu_prefix(resources.gpu, device(wildcards), ranks(wildcards))

    return param


def all_cores(wildcards):
    """threads of a benchmark or data preparation: every core (a function: --unlock and -n need
    no --cores)."""
    return workflow.cores


def stamp_args(wildcards, output):
    """The stamp options of a table, figure, the claims or job times (STAMP_ARGS: the config's
    sha256, and whether it rehearses). A function of the job's output, which Snakemake counts as
    derived and leaves out of its params rerun trigger: the stamp names the config an output was
    made under, and a change to a part of the config that it does not read (bench: for Table 1)
    must not rebuild it. What it reads are its inputs (runs, benchmarks, data), rebuilt when the
    params of their jobs (a training run's config) change."""
    return STAMP_ARGS


def job_records_dir(wildcards):
    """The directory of the job records that `tapernorm job-times` reads (its inputs)."""
    return JOB_RECORDS


# ---- the training families' jobs (train): the run's family answers ------------------------------


def train_family(wildcards):
    return PLAN.family(wildcards.family)


def train_json(wildcards):
    family = train_family(wildcards)
    return json.dumps(family.run_config(wildcards.run, PRETRAIN_DATA))


def train_gpus(wildcards):
    return train_family(wildcards).gpus(wildcards.run)


def train_device(wildcards):
    return train_family(wildcards).device


def train_minutes(wildcards):
    return train_family(wildcards).runtime(wildcards.run)


# ---- the claims and the manifest ------------------------------------------------------------------


def lr_grid_input(wildcards):
    """The committed LR grid, where the checkout has it (the claims judge by it only at its scale):
    the working directory's, else the checkout's (a run with `-d OTHERDIR`, e.g. from a read-only
    checkout, reads the committed records where they are)."""
    for path in (LR_GRID, os.path.join(workflow.basedir, LR_GRID)):
        if os.path.isfile(path):
            return [path]
    return []


def scaling_input(wildcards):
    """The committed scaling study's summary, where the checkout has it (claims 1-4, DyT's row)."""
    return [SCALING_SUMMARY] if os.path.isfile(SCALING_SUMMARY) else []


def gpu_input(wildcards):
    """The newest committed first-GPU check's env.json, where the checkout has one (claim 7)."""
    newest = wb.newest_gpu_check(GPU_CHECKS)
    return [newest] if newest else []


# every default target (the all rule's input), the LR grid's figure where the checkout has the grid
ALL_TARGETS = PLAN.all_targets(lr_grid=bool(lr_grid_input(None)))


def manifest_files(wildcards):
    """Every file of the run that the manifest hashes: the data it read, every run's files, the
    fold checks, benchmarks, evaluations, job records, and every default target."""
    files = [*PRETRAIN_DATA_FILES.values()]
    trained = [PLAN.pretrain, PLAN.ablation, PLAN.sweep]
    files += run_files([d for fam in trained for d in family_dirs(fam)])
    files += [f"results/fold/{run}/verify.json" for run in PLAN.fold_runs()]
    files += PLAN.bench_csvs() + PLAN.timed_jobs()
    if PLAN.finetune:
        files += [*FINETUNE_DATA_FILES.values()]
        for s in config["finetune"]["eval"]["sets"]:
            files += [f"data/eval/{s}/meta.json", f"data/eval/{s}/rows.bin"]
        runs = PLAN.finetune.run_dirs() + family_dirs(PLAN.finetune_base)
        files += [f"{run}/{f}" for run in runs for f in (*MODEL_FILES, "eval.json")]
        files += PLAN.finetune_evals() + PLAN.finetune_verify()
        # the folded models (directories: `tapernorm manifest` hashes the files in them)
        files += [f"{os.path.dirname(v)}/folded" for v in PLAN.finetune_verify()]
    files += [t for t in ALL_TARGETS if t != wp.MANIFEST]
    return list(dict.fromkeys(files))
