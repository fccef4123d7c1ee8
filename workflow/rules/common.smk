import json
import os

from tapernorm import pipeline as tp
from tapernorm.analysis.runs import RUN_FILES
from tapernorm.config import check_yaml_files
from tapernorm.run_identity import MODEL_FILES

# Snakemake's YAML loader keeps the last of two equal keys: reject them (and name the line).
check_yaml_files(workflow.configfiles)
# Validate (and complete with defaults) before any job runs; errors name the offending key.
config.update(
    tp.validate_pipeline_config(
        config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
    )
)

PRETRAIN_DATA = "data/pretrain"
# the conda env (--sdm conda) of the rules that may hold a GPU: CUDA torch when the config uses one
GPU_ENV = tp.gpu_rules_env(config)
# Snakemake's job records (benchmark:) of the long jobs, <rule>/<wildcards>.tsv; results/tables/job_times
JOB_RECORDS = "results/job_records"
FIG_WIDTH = tp.figure_width(config)
TABLE_FILES = ("csv", "md", "tex", "html")  # html: what the report shows
SWEEP = bool(config["ablation"] and config["anchor_sweep"])
FAMILIES = (
    ["pretrain"]
    + (["ablation"] if config["ablation"] else [])
    + ([tp.SWEEP_FAMILY] if SWEEP else [])
)


wildcard_constraints:
    family="|".join(FAMILIES),
    run=r"[a-z_]+-d\d+-s\d+|(eq5|relative)-lam[0-9][0-9.e+-]*",


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


def run_files(eval_paths, names=RUN_FILES):
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


FIGURES = {
    "fig1_gate_schedule": pretrain_evals(FIG_WIDTH, ["internal_aux"])[:1],
    "fig2_train_loss": pretrain_evals(FIG_WIDTH, tp.FIG2_VARIANTS),
    "fig3_logit_norm": pretrain_evals(FIG_WIDTH),
    "fig4_grad_norms": pretrain_evals(FIG_WIDTH),
}
if config["ablation"]:
    FIGURES["fig4b_ablation_grad_norms"] = ablation_evals()
    FIGURES["fig6_scale_anchor"] = ablation_evals()


def anchor_sweep_evals():
    """The ablation's runs and the anchor_sweep points (table_anchor, fig7)."""
    names = tp.sweep_runs(config) if SWEEP else []
    return ablation_evals() + evals(tp.SWEEP_FAMILY, names)


if SWEEP:
    FIGURES["fig7_anchor_sweep"] = anchor_sweep_evals()
SWEEP_TABLES = (
    [f"results/tables/table_anchor.{ext}" for ext in TABLE_FILES] if SWEEP else []
)

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
    inputs = dict(FINETUNE_DATA_FILES)
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
    if tp.parse_finetune_run(w.ftrun)[0] == "all_taperln":
        fold = f"results/finetune/fold/{w.ftrun}"
        inputs["verify"] = f"{fold}/verify.json"
        inputs |= model_files(f"{fold}/folded", prefix="folded_")
    return inputs


FINETUNE_TABLES = [
    f"results/tables/table{n}.{ext}"
    for n in ((4, 6) if config["finetune"] else ())
    for ext in TABLE_FILES
]

# Inference benchmarks (Table 3, the decode table, fig5, claim 7); bench: null skips them
BENCH_GPU = int(bool(config["bench"]) and tp.device_is_gpu(config["bench"]["device"]))
BENCH_CSVS = (
    ["results/bench/forward.csv", "results/bench/decode.csv"] if config["bench"] else []
)


def bench_inputs(w):
    """tp.bench_inputs (the timed runs' eval.json, the fold check) and the model files that the
    benchmark loads from each timed run."""
    inputs = tp.bench_inputs(config)
    for key, path in list(inputs.items()):
        if path.endswith("/eval.json"):
            inputs |= model_files(path.rsplit("/", 1)[0], prefix=f"{key}_")
    return inputs


BENCH_TARGETS = (
    [
        f"results/tables/{t}.{ext}"
        for t in ("table3", "table_decode")
        for ext in TABLE_FILES
    ]
    + [f"figures/fig5_decode_speedup.{ext}" for ext in ("pdf", "png")]
    if config["bench"]
    else []
)


def timed_jobs():
    """Job records (benchmark: files, <rule>/<wildcards>.tsv relative to JOB_RECORDS) of this
    config's jobs that keep one: training, fine-tuning, inference benchmarks."""
    records = []
    for family in FAMILIES:
        sweep = family == tp.SWEEP_FAMILY
        for n in tp.sweep_runs(config) if sweep else tp.family_runs(config, family):
            records.append(f"train/{family}/{n}.tsv")
    for model in tp.finetune_base_models(config) if config["finetune"] else []:
        records.append(f"pretrain_finetune_base/{model}.tsv")
    records += [f"finetune/{run}.tsv" for run in FINETUNE_RUNS]
    for csv in BENCH_CSVS:  # results/bench/forward.csv: rule bench_forward
        records.append(f"bench_{os.path.basename(csv).removesuffix('.csv')}.tsv")
    return records


ALL_TARGETS = (
    [f"figures/{name}.{ext}" for name in FIGURES for ext in ("pdf", "png")]
    + [f"results/tables/table{n}.{ext}" for n in (1, 2, 5) for ext in TABLE_FILES]
    + SWEEP_TABLES
    + FINETUNE_TABLES
    + [
        f"results/export/{r}/verify.json"
        for r in FINETUNE_RUNS
        if r.startswith("all_taperln-")
    ]
    + BENCH_TARGETS
    + ["results/claims.md", "results/claims.html"]
    + [f"results/tables/job_times.{ext}" for ext in TABLE_FILES]
)
