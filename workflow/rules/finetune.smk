# GPT-2 fine-tuning family (Sec. 6.4): GPT-2-token shards of the fine-tuning corpus, the base
# model (pre-trained here, or a hub model), one run per protocol x model, the All-TaperLN fold
# check, scores on each evaluation set, Tables 4 and 6. Run names: <protocol>-<model>.
# Included when the config has `finetune`.
from tapernorm import job_resources as jr

FINETUNE = PLAN.finetune
FINETUNE_DATA = "data/finetune"
FINETUNE_DATA_FILES = data_files(FINETUNE_DATA, sentencepiece=False)  # GPT-2 BPE
EVAL_SETS = config["finetune"]["eval"]["sets"]


wildcard_constraints:
    ftrun=wn.FINETUNE_RUN_WILDCARD,
    ftmodel=wn.FINETUNE_MODEL_WILDCARD,
    evalset="|".join(EVAL_SETS),


def finetune_inputs(w):
    inputs = dict(FINETUNE_DATA_FILES, rehearsal=REHEARSAL_INPUTS)
    model = wn.parse_finetune_run(w.ftrun)[1]
    if model in FINETUNE.base_models():
        inputs |= model_files(run_dir("finetune_base", model), prefix="base_")
    return inputs


def finetune_eval_inputs(w):
    run = run_dir("finetune", w.ftrun)
    inputs = {
        "run": f"{run}/eval.json",
        **model_files(run),
        "data": f"data/eval/{w.evalset}/meta.json",
        "rows": f"data/eval/{w.evalset}/rows.bin",
    }
    if wn.parse_finetune_run(w.ftrun)[0] == "all_taperln":  # its fold check
        fold = f"results/finetune/fold/{w.ftrun}"
        inputs |= {"verify": f"{fold}/verify.json", "folded": f"{fold}/folded"}
    return inputs


def ft_gpus(wildcards):
    """GPUs of a fine-tuning run (torchrun across them when more than one)."""
    return FINETUNE.gpus(wildcards.ftrun)


def ft_check_gpus(wildcards):
    """GPUs of a fine-tuning run's fold check and evaluation: one at most."""
    return FINETUNE.check_gpus(wildcards.ftrun)


def ft_device(wildcards):
    """The configured device (auto: resolved where the job runs)."""
    return FINETUNE.device


def ft_job(job, key):
    """A resources function: `key` (mem_mb, runtime) of a fold, eval or export job, sized by the
    fine-tuned model's parameter count (jr.model_job_resources): the run's own once it exists
    (Snakemake evaluates resources again when a job's inputs are there), else an estimate.
    """

    def resource(wildcards, input):
        shape = jr.run_shape(input.config)
        model = wn.parse_finetune_run(wildcards.ftrun)[1]
        return jr.model_job_resources(config, model, job, shape)[key]

    return resource


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


rule prepare_finetune_data:
    input:
        REHEARSAL_INPUTS,
    output:
        **FINETUNE_DATA_FILES,
    log:
        "logs/finetune/prepare_data.log",
    conda:
        "../envs/tapernorm.yaml"
    threads: all_cores  # tokenizing processes (a cluster profile sets its own: set-threads)
    params:
        args=finetune_prepare_args(config),
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-data {params.args} --workers {threads} --out {params.out} > {log} 2>&1"


if PLAN.finetune_base:

    rule pretrain_finetune_base:
        input:
            **FINETUNE_DATA_FILES,
        output:
            **model_files(run_dir("finetune_base", "{ftmodel}")),
            eval=f"{run_dir('finetune_base', '{ftmodel}')}/eval.json",
        log:
            "logs/runs/finetune_base/{ftmodel}.log",
        benchmark:
            wn.job_record("pretrain_finetune_base", "{ftmodel}")
        conda:
            GPU_ENV
        threads: 1
        resources:
            gpu=lambda w: PLAN.finetune_base.gpus(w.ftmodel),
        params:
            run=lambda w: json.dumps(
                PLAN.finetune_base.run_config(w.ftmodel, FINETUNE_DATA)
            ),
            gpus=gpu_claim(lambda w: PLAN.finetune_base.device),
            out=output_dir("eval"),
        shell:
            "OMP_NUM_THREADS={threads} {params.gpus} tapernorm train --config-json {params.run:q} "
            "--out {params.out} > {log} 2>&1"


rule finetune:
    input:
        unpack(finetune_inputs),
    output:
        **model_files(run_dir("finetune", "{ftrun}")),
        eval=f"{run_dir('finetune', '{ftrun}')}/eval.json",
        metrics=f"{run_dir('finetune', '{ftrun}')}/metrics.jsonl",
    log:
        "logs/runs/finetune/{ftrun}.log",
    benchmark:
        wn.job_record("finetune", "{ftrun}")
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=ft_gpus,
        nodes=1,  # torchrun --standalone: every process on one node (SLURM: --nodes=1)
        mem_mb=lambda w: FINETUNE.mem_mb(w.ftrun),
        runtime=lambda w: FINETUNE.runtime(w.ftrun),
    params:
        run=lambda w: json.dumps(FINETUNE.run_config(w.ftrun, FINETUNE_DATA)),
        gpus=gpu_claim(ft_device, lambda w: FINETUNE.ranks(w.ftrun)),
        launch=lambda w: FINETUNE.launcher(w.ftrun),
        out=output_dir("eval"),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} {params.launch} train "
        "--config-json {params.run:q} --out {params.out} > {log} 2>&1"


rule fold_finetune:
    input:
        **FINETUNE_DATA_FILES,
        **model_files(run_dir("finetune", "{ftrun}")),
        eval=f"{run_dir('finetune', '{ftrun}')}/eval.json",
    output:
        # folded/ is left empty when the run diverged (verify.json then says why the fold was
        # skipped, and the evaluation scores no folded model)
        folded=directory("results/finetune/fold/{ftrun}/folded"),
        verify="results/finetune/fold/{ftrun}/verify.json",
    log:
        "logs/finetune/fold/{ftrun}.log",
    wildcard_constraints:
        ftrun=wn.FOLDED_FINETUNE_RUN_WILDCARD,
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=ft_check_gpus,
        mem_mb=ft_job("fold", "mem_mb"),
        runtime=ft_job("fold", "runtime"),
    params:
        rtol=config["fold"]["rtol"],
        device=ft_device,
        gpus=gpu_claim(ft_device),
        model=input_dir("eval"),
        data=input_dir("meta"),
        out=output_dir("verify"),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm fold --model {params.model} "
        "--data {params.data} --out {params.out} --rtol {params.rtol} "
        "--device {params.device} > {log} 2>&1"


rule prepare_eval:
    input:
        prepare_eval_inputs,
    output:
        meta="data/eval/{evalset}/meta.json",
        rows="data/eval/{evalset}/rows.bin",
    log:
        "logs/finetune/prepare_eval_{evalset}.log",
    conda:
        "../envs/tapernorm.yaml"
    params:
        args=lambda w: prepare_eval_args(config, w.evalset, FINETUNE_DATA),
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-eval {params.args} --out {params.out} > {log} 2>&1"


rule eval_finetune:
    input:
        unpack(finetune_eval_inputs),
    output:
        "results/finetune/eval/{ftrun}/{evalset}.json",
    log:
        "logs/finetune/eval/{ftrun}/{evalset}.log",
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=ft_check_gpus,
        mem_mb=ft_job("eval", "mem_mb"),
        runtime=ft_job("eval", "runtime"),
    params:
        model=input_dir("run"),
        data=input_dir("data"),
        folded=folded_option,
        device=ft_device,
        gpus=gpu_claim(ft_device),
        dtype=config["finetune"]["eval"]["dtype"],
        batch=config["finetune"]["eval"]["batch_size"],
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm eval --model {params.model} "
        "--data {params.data} --batch-size {params.batch} --dtype {params.dtype} "
        "--device {params.device} {params.folded} --out {output} > {log} 2>&1"


# One rule per table, named after it, so that each gets its own caption in the report.
for n in wp.FINETUNE_TABLES:

    rule:
        name:
            f"table{n}"
        input:
            evals=FINETUNE.eval_paths(),
            runs=run_files(FINETUNE.run_dirs(), ("config.json", "eval.json")),
        output:
            **table_outputs(f"table{n}"),
        log:
            f"logs/tables/table{n}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            n=n,
            runs=run_dirs,
            out=table_stem,
            stamp=STAMP_ARGS,
        shell:
            "tapernorm table {params.n} --runs {params.runs} --evals {input.evals} "
            "--out {params.out} {params.stamp} > {log} 2>&1"
