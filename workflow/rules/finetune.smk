# GPT-2 fine-tuning family (Sec. 6.4): GPT-2-token shards of the fine-tuning corpus, the base
# model (pre-trained here, or a hub model), one run per protocol x model, the All-TaperLN fold
# check, scores on each evaluation set, Tables 4 and 6. Run names: <protocol>-<model>.

from tapernorm.data import EVAL_SETS


wildcard_constraints:
    ftrun=r"[a-z_]+-[a-z0-9][a-z0-9.\-]*",
    ftmodel=r"[a-z0-9][a-z0-9.\-]*",
    evalset="|".join(EVAL_SETS),


rule prepare_finetune_data:
    output:
        **FINETUNE_DATA_FILES,
    log:
        "logs/finetune/prepare_data.log",
    conda:
        "../envs/tapernorm.yaml"
    params:
        args=lambda w: tp.finetune_prepare_args(config),
        out=lambda w, output: os.path.dirname(output.meta),
    shell:
        "tapernorm prepare-data {params.args} --out {params.out} > {log} 2>&1"


rule pretrain_finetune_base:
    input:
        **FINETUNE_DATA_FILES,
    output:
        **model_files(f"{tp.FINETUNE_BASE_ROOT}/{{ftmodel}}"),
        eval=f"{tp.FINETUNE_BASE_ROOT}/{{ftmodel}}/eval.json",
    log:
        "logs/runs/finetune_base/{ftmodel}.log",
    benchmark:
        f"{JOB_RECORDS}/pretrain_finetune_base/{{ftmodel}}.tsv"
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=lambda w: tp.finetune_base_gpus(config),
    params:
        run=lambda w: json.dumps(
            tp.finetune_base_config(config, w.ftmodel, FINETUNE_DATA)
        ),
        out=lambda w, output: os.path.dirname(output.eval),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm train --config-json {params.run:q} "
        "--out {params.out} > {log} 2>&1"


rule finetune:
    input:
        unpack(finetune_inputs),
    output:
        **model_files("results/runs/finetune/{ftrun}"),
        eval="results/runs/finetune/{ftrun}/eval.json",
        metrics="results/runs/finetune/{ftrun}/metrics.jsonl",
    log:
        "logs/runs/finetune/{ftrun}.log",
    benchmark:
        f"{JOB_RECORDS}/finetune/{{ftrun}}.tsv"
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=lambda w: tp.finetune_gpus(config, ft_model(w)),
        mem_mb=lambda w: ft_spec(w)["mem_mb"],
        runtime=lambda w: ft_spec(w)["runtime"],
    params:
        run=lambda w: json.dumps(tp.finetune_run_config(config, w.ftrun, FINETUNE_DATA)),
        launch=lambda w: tp.finetune_launcher(config, ft_model(w)),
        out=lambda w, output: os.path.dirname(output.eval),
    shell:
        "OMP_NUM_THREADS={threads} {params.launch} train --config-json {params.run:q} "
        "--out {params.out} > {log} 2>&1"


rule fold_finetune:
    input:
        **FINETUNE_DATA_FILES,
        **model_files("results/runs/finetune/{ftrun}"),
        eval="results/runs/finetune/{ftrun}/eval.json",
    output:
        **model_files("results/finetune/fold/{ftrun}/folded", prefix="folded_"),
        verify="results/finetune/fold/{ftrun}/verify.json",
    log:
        "logs/finetune/fold/{ftrun}.log",
    wildcard_constraints:
        ftrun=r"all_taperln-[a-z0-9][a-z0-9.\-]*",
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=lambda w: min(1, tp.finetune_gpus(config, ft_model(w))),
        mem_mb=lambda w: ft_spec(w)["mem_mb"],
    params:
        rtol=config["fold"]["rtol"],
        device=lambda w: "cuda" if tp.finetune_gpus(config, ft_model(w)) else "cpu",
        model=lambda w, input: os.path.dirname(input.eval),
        data=lambda w, input: os.path.dirname(input.meta),
        out=lambda w, output: os.path.dirname(output.verify),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm fold --model {params.model} --data {params.data} "
        "--out {params.out} --rtol {params.rtol} --device {params.device} > {log} 2>&1"


rule prepare_eval:
    input:
        lambda w: list(FINETUNE_DATA_FILES.values()) if w.evalset == "heldout" else [],
    output:
        meta="data/eval/{evalset}/meta.json",
        rows="data/eval/{evalset}/rows.bin",
    log:
        "logs/finetune/prepare_eval_{evalset}.log",
    conda:
        "../envs/tapernorm.yaml"
    params:
        args=lambda w: tp.prepare_eval_args(config, w.evalset, FINETUNE_DATA),
        out=lambda w, output: os.path.dirname(output.meta),
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
        gpu=lambda w: min(1, tp.finetune_gpus(config, ft_model(w))),
        mem_mb=lambda w: ft_spec(w)["mem_mb"],
    params:
        model=lambda w, input: os.path.dirname(input.run),
        data=lambda w, input: os.path.dirname(input.data),
        folded=lambda w, input: (
            f"--folded {os.path.dirname(input.verify)}/folded"
            if "verify" in input.keys()
            else ""
        ),
        device=lambda w: "cuda" if tp.finetune_gpus(config, ft_model(w)) else "cpu",
        dtype=config["finetune"]["eval"]["dtype"] if config["finetune"] else "float32",
        batch=config["finetune"]["eval"]["batch_size"] if config["finetune"] else 1,
    shell:
        "OMP_NUM_THREADS={threads} tapernorm eval --model {params.model} --data {params.data} "
        "--batch-size {params.batch} --dtype {params.dtype} --device {params.device} "
        "{params.folded} --out {output} > {log} 2>&1"


rule finetune_table:
    input:
        evals=finetune_evals(),
        runs=run_files(
            [f"results/runs/finetune/{r}/eval.json" for r in FINETUNE_RUNS],
            ("config.json", "eval.json"),
        ),
    output:
        csv="results/tables/table{n}.csv",
        md="results/tables/table{n}.md",
        tex="results/tables/table{n}.tex",
        html=report(
            "results/tables/table{n}.html",
            caption="../report/finetune_tables.rst",
            category="Tables",
        ),
    log:
        "logs/tables/table{n}.log",
    wildcard_constraints:
        n="[46]",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=lambda w, input: dirs_of(input.runs),
        out=lambda w, output: output.csv[: -len(".csv")],
    shell:
        "tapernorm table {wildcards.n} --runs {params.runs} --evals {input.evals} "
        "--out {params.out} > {log} 2>&1"
