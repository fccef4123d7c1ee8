import json
import os

from tapernorm import pipeline as tp
from tapernorm import job_resources as jr
from tapernorm import provenance
from tapernorm.analysis.runs import ANALYSIS_INPUTS
from tapernorm.data import EVAL_SETS
from tapernorm.run_identity import MODEL_FILES
from tapernorm.run_lock import WAIT_ENV

CONFIG_SCHEMA = f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
# Snakemake's YAML loader keeps the last of two equal keys: reject them (and name the line); a
# target written after --configfile, which Snakemake reads as a config file, is named as such.
tp.check_config_files(workflow.configfiles, CONFIG_SCHEMA)
# Validate (and complete with defaults) before any job runs; errors name the offending key.
config.update(tp.validate_pipeline_config(config, CONFIG_SCHEMA))
# A train job whose run another invocation is writing waits for it instead of failing (Snakemake
# deletes a failed job's outputs: the running job's); docs/usage.md, "Rerunning a run".
os.environ.setdefault(WAIT_ENV, "1")
# Hugging Face's caches (hub models, datasets) in data/hf_home unless HF_HOME or a cache variable
# is set (docs/usage.md, "Data"); the jobs inherit it, on a cluster too (sbatch --export=ALL)
os.environ.update(jr.hf_cache_env(os.environ, os.getcwd()))
# the validated config's sha256, named in every table's, figure's and the claims' provenance stamp
CONFIG_HASH = provenance.config_hash(config)
# the stamp arguments of every table, figure, the claims and job times: a rehearsal says so in each
STAMP_ARGS = f"--config-hash {CONFIG_HASH}" + (
    " --rehearsal" if config["rehearsal"] else ""
)
# the committed LR grid (docs/norm-free.md): the claims use it where its scale is the runs'
LR_GRID = "results/cpu/lr_grid/lr_grid.json"
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
GPU_ENV = tp.gpu_rules_env(config)
# Snakemake's job records (benchmark:) of the long jobs, <rule>/<wildcards>.tsv; results/tables/job_times
JOB_RECORDS = tp.JOB_RECORDS
FIG_WIDTH = tp.figure_width(config)
SWEEP = tp.sweeps(config)
FAMILIES = tp.families(config)


wildcard_constraints:
    family="|".join(FAMILIES),
    run=tp.RUN_WILDCARD,
    ftrun=tp.FINETUNE_RUN_WILDCARD,
    ftmodel=tp.FINETUNE_MODEL_WILDCARD,
    evalset="|".join(EVAL_SETS),


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


def run_dir(family, name):
    return f"results/runs/{family}/{name}"


def model_files(run, prefix=""):
    """{name: path} of what loading the model of run directory `run` reads (config, weights)."""
    return {f"{prefix}{f.split('.')[0]}": f"{run}/{f}" for f in MODEL_FILES}


def run_files(eval_paths, names=ANALYSIS_INPUTS):
    """The files `names` (default: all that the analysis reads) of the run directories of a list of
    eval.json paths."""
    return [f"{p.rsplit('/', 1)[0]}/{f}" for p in eval_paths for f in names]


def evals(family, names):
    return [f"{run_dir(family, n)}/eval.json" for n in names]


def pretrain_evals(width=None, variants=None):
    names = tp.family_runs(config, "pretrain", width)
    if variants is not None:
        names = [n for n in names if tp.parse_run_name(n)[0] in variants]
    return evals("pretrain", names)


def ablation_evals():
    return (
        evals("ablation", tp.family_runs(config, "ablation"))
        if config["ablation"]
        else []
    )


def fold_names():
    return [tp.run_name(v, FIG_WIDTH, 0) for v in config["fold"]["variants"]]


def dirs_of(paths):
    """Run directories of a list of files inside them, in order, each once (for --runs)."""
    return " ".join(dict.fromkeys(p.rsplit("/", 1)[0] for p in paths))


def anchor_sweep_evals():
    """The ablation's runs and the anchor_sweep points (table_anchor, fig7)."""
    return ablation_evals() + sweep_evals()


def sweep_evals():
    """The anchor_sweep points' runs (none without the sweep)."""
    return evals(tp.SWEEP_FAMILY, tp.sweep_runs(config) if SWEEP else [])


FIGURE_RUNS = {  # the runs each figure plots
    "fig1_gate_schedule": pretrain_evals(FIG_WIDTH, ["internal_aux"])[:1],
    "fig2_train_loss": pretrain_evals(FIG_WIDTH, tp.FIG2_VARIANTS),
    "fig3_logit_norm": pretrain_evals(FIG_WIDTH),
    "fig4_grad_norms": pretrain_evals(FIG_WIDTH),
    "fig4b_ablation_grad_norms": ablation_evals(),
    "fig6_scale_anchor": ablation_evals(),
    "fig7_anchor_sweep": anchor_sweep_evals(),
}
FIGURES = {name: FIGURE_RUNS[name] for name in tp.figures(config)}  # this config's
ABLATION_FIGURES = (
    "fig4b_ablation_grad_norms",
    "fig6_scale_anchor",
    "fig7_anchor_sweep",
)


def figure_width(wildcards, output):
    """--width of a figure: the ablation's for the ablation's figures, else figures 2-4's."""
    name = os.path.basename(output.pdf).removesuffix(".pdf")
    family = "ablation" if name in ABLATION_FIGURES else "pretrain"
    return tp.figure_width(config, family)


# GPT-2 fine-tuning family (Tables 4 and 6, claim 8): runs <protocol>-<model>
FINETUNE_DATA = "data/finetune"
FINETUNE_DATA_FILES = data_files(FINETUNE_DATA, sentencepiece=False)  # GPT-2 BPE
FINETUNE_RUNS = tp.finetune_runs(config) if config["finetune"] else []


def finetune_evals():
    """Eval JSON of every fine-tuning run on every evaluation set."""
    if not config["finetune"]:
        return []
    sets = config["finetune"]["eval"]["sets"]
    return [f"results/finetune/eval/{r}/{s}.json" for r in FINETUNE_RUNS for s in sets]


def finetune_verify():
    """verify.json of the folded All-TaperLN fine-tuning runs."""
    if not config["finetune"]:
        return []
    names = tp.finetune_runs(config, ["all_taperln"])
    return [f"results/finetune/fold/{r}/verify.json" for r in names]


def ft_model(w):
    return tp.parse_finetune_run(w.ftrun)[1]


def ft_spec(w):
    return tp.finetune_model(config, ft_model(w))


def finetune_inputs(w):
    inputs = dict(FINETUNE_DATA_FILES, rehearsal=REHEARSAL_INPUTS)
    if ft_model(w) in tp.finetune_base_models(config):
        base = f"{tp.FINETUNE_BASE_ROOT}/{ft_model(w)}"
        inputs |= model_files(base, prefix="base_")
    return inputs


def finetune_eval_inputs(w):
    run = f"results/runs/finetune/{w.ftrun}"
    inputs = {
        "run": f"{run}/eval.json",
        **model_files(run),
        "data": f"data/eval/{w.evalset}/meta.json",
        "rows": f"data/eval/{w.evalset}/rows.bin",
    }
    if tp.parse_finetune_run(w.ftrun)[0] == "all_taperln":  # its fold check
        fold = f"results/finetune/fold/{w.ftrun}"
        inputs |= {"verify": f"{fold}/verify.json", "folded": f"{fold}/folded"}
    return inputs


# Inference benchmarks (Table 3, the decode table, fig5, claim 7); bench: null skips them
BENCH_GPU = int(bool(config["bench"]) and tp.device_is_gpu(config["bench"]["device"]))
BENCH_CSVS = tp.bench_csvs(config)


def bench_inputs(w):
    """tp.bench_inputs (the timed runs' eval.json, the fold check) and the model files that the
    benchmark loads from each timed run."""
    inputs = tp.bench_inputs(config)
    for key, path in list(inputs.items()):
        if os.path.basename(path) == "eval.json":
            inputs |= model_files(os.path.dirname(path), prefix=f"{key}_")
    return inputs


# ---- params, threads and resources: named functions of a job's wildcards (and input/output) ----------
# (functions, not values: they are called per job, so a rule of a family that this config leaves
# out, e.g. finetune: null, is parsed without its section)


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


def train_json(wildcards):
    return json.dumps(
        tp.run_config(config, wildcards.family, wildcards.run, PRETRAIN_DATA)
    )


def gpu_claim(device, ranks=lambda wildcards: 1):
    """A params function: the `tapernorm gpus` prefix that gives the job the GPUs it holds
    (resources.gpu, as Snakemake granted it) on a workstation, for a command on device(wildcards)
    of ranks(wildcards) processes; "" for a job that holds none."""

    def param(wildcards, resources):
        return tp.gpu_prefix(resources.gpu, device(wildcards), ranks(wildcards))

    return param


def train_gpus(wildcards):
    return int(tp.wants_gpu(config, wildcards.family))


def train_device(wildcards):
    return tp.train_device(config, wildcards.family)


def train_minutes(wildcards):
    return tp.train_runtime(config, wildcards.family, wildcards.run)


def ft_mem_mb(wildcards):
    return ft_spec(wildcards)["mem_mb"]


def ft_minutes(wildcards):
    return ft_spec(wildcards)["runtime"]


def ft_gpus(wildcards):
    """GPUs of a fine-tuning run (torchrun across them when more than one)."""
    return tp.finetune_gpus(config, ft_model(wildcards))


def ft_check_gpus(wildcards):
    """GPUs of a fine-tuning run's fold check and evaluation: one at most."""
    return min(1, ft_gpus(wildcards))


def ft_device(wildcards):
    """The configured device (auto: resolved where the job runs)."""
    return tp.finetune_device(config)


def ft_ranks(wildcards):
    return tp.finetune_ranks(config, ft_model(wildcards))


def ft_launcher(wildcards):
    return tp.finetune_launcher(config, ft_model(wildcards))


def ft_job(job, key):
    """A resources function: `key` (mem_mb, runtime) of a fold, eval or export job, sized by the
    fine-tuned model's parameter count (jr.model_job_resources): the run's own once it exists
    (Snakemake evaluates resources again when a job's inputs are there), else an estimate.
    """

    def resource(wildcards, input):
        shape = jr.run_shape(input.config)
        return jr.model_job_resources(config, ft_model(wildcards), job, shape)[key]

    return resource


def ft_json(wildcards):
    return json.dumps(tp.finetune_run_config(config, wildcards.ftrun, FINETUNE_DATA))


def ft_base_gpus(wildcards):
    return tp.finetune_base_gpus(config)


def ft_base_device(wildcards):
    return config["finetune"]["pretrain"]["train"]["device"]


def ft_base_json(wildcards):
    return json.dumps(tp.finetune_base_config(config, wildcards.ftmodel, FINETUNE_DATA))


def ft_prepare_args(wildcards):
    return tp.finetune_prepare_args(config)


def ft_eval_setting(key):
    """A params function: finetune.eval's `key` (dtype, batch_size)."""

    def param(wildcards):
        return config["finetune"]["eval"][key]

    return param


def folded_option(wildcards, input):
    """--folded of an evaluation: the fold check's folded model, when the run has one (a diverged
    run's is empty: `tapernorm eval` then records why instead of reading it)."""
    if "folded" not in input.keys():
        return ""
    return f"--folded {input.folded}"


def prepare_eval_inputs(wildcards):
    """The held-out set is cut from the fine-tuning shards; the others come from the hub (in a
    rehearsal, from its stand-ins)."""
    if wildcards.evalset == "heldout":
        return list(FINETUNE_DATA_FILES.values())
    return REHEARSAL_INPUTS


def prepare_eval_args(wildcards):
    return tp.prepare_eval_args(config, wildcards.evalset, FINETUNE_DATA)


def all_cores(wildcards):
    """threads of a benchmark: every core (a function: --unlock and -n need no --cores)."""
    return workflow.cores


def bench_device(wildcards):
    return config["bench"]["device"]


def bench_models(wildcards):
    return tp.bench_model_args(config)


def job_records_dir(wildcards):
    """The directory of the job records that `tapernorm job-times` reads (its inputs)."""
    return JOB_RECORDS


def bench_grid(kind):
    """A params function: the grid arguments of `tapernorm bench <kind>`."""

    def param(wildcards):
        return tp.bench_args(config, kind)

    return param


def lr_grid_input(wildcards):
    """The committed LR grid, where the checkout has it (the claims judge by it only at its scale)."""
    return [LR_GRID] if os.path.isfile(LR_GRID) else []


def config_json(wildcards):
    return json.dumps(config)


def manifest_files(wildcards):
    """Every file of the run that the manifest hashes: the data it read, every run's files, the
    fold checks, benchmarks, evaluations, job records, and every target of rule all."""
    files = [*PRETRAIN_DATA_FILES.values()]
    files += run_files(pretrain_evals() + ablation_evals() + sweep_evals())
    files += expand("results/fold/{run}/verify.json", run=fold_names())
    files += BENCH_CSVS + tp.timed_jobs(config)
    if config["finetune"]:
        files += [*FINETUNE_DATA_FILES.values()]
        for s in config["finetune"]["eval"]["sets"]:
            files += [f"data/eval/{s}/meta.json", f"data/eval/{s}/rows.bin"]
        runs = [f"results/runs/finetune/{r}" for r in FINETUNE_RUNS]
        runs += [
            f"{tp.FINETUNE_BASE_ROOT}/{m}" for m in tp.finetune_base_models(config)
        ]
        files += [f"{run}/{f}" for run in runs for f in (*MODEL_FILES, "eval.json")]
        files += finetune_evals() + finetune_verify()
        # the folded models (directories: `tapernorm manifest` hashes the files in them)
        files += [f"{os.path.dirname(v)}/folded" for v in finetune_verify()]
    files += [t for t in tp.all_targets(config) if t != tp.MANIFEST]
    return list(dict.fromkeys(files))
