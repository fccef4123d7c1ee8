# GPT-2 fine-tuning family (Sec. 6.4): GPT-2-token shards of the fine-tuning corpus, the base
# model (pre-trained here, or a hub model), one run per protocol x model, the All-TaperLN fold
# check, scores on each evaluation set, Tables 4 and 6. Run names: <protocol>-<model>.
# Included when the config has `finetune`.


wildcard_constraints:
    ftrun=wn.FINETUNE_RUN_WILDCARD,
    ftmodel=wn.FINETUNE_MODEL_WILDCARD,
    evalset="|".join(EVAL_SETS),


rule prepare_finetune_data:
    input:
        REHEARSAL_INPUTS,
    output:
        **FINETUNE_DATA_FILES,
    log:
        "logs/finetune/prepare_data.log",
    priority: priorities.PREPARE
    conda:
        "../envs/tapernorm.yaml"
    threads: all_cores  # tokenizing processes (a cluster profile sets its own: set-threads)
    params:
        config=json.dumps(wf.finetune_data_config(config)),  # GPT-2 BPE
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-data --config-json {params.config:q} --workers {threads} "
        "--out {params.out} > {log} 2>&1"


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
        priority: priorities.GATE
        conda:
            GPU_ENV
        threads: 1
        resources:
            gpu=lambda w: PLAN.finetune_base.gpus(w.ftmodel),
        params:
            run=lambda w: PLAN.finetune_base.run_config(
                w.ftmodel, FINETUNE_DATA
            ).to_json(),
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
        mem_mb=lambda w: wft.model_of(FINETUNE, w.ftrun)["mem_mb"],
        runtime=lambda w: wft.model_of(FINETUNE, w.ftrun)["runtime"],
    params:
        run=lambda w: FINETUNE.run_config(w.ftrun, FINETUNE_DATA).to_json(),
        gpus=gpu_claim(ft_device, lambda w: wft.ranks(FINETUNE, w.ftrun)),
        launch=lambda w: wft.launcher(FINETUNE, w.ftrun),
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
        **wf.eval_set_files("{evalset}"),
    log:
        "logs/finetune/prepare_eval_{evalset}.log",
    priority: priorities.PREPARE
    conda:
        "../envs/tapernorm.yaml"
    params:
        config=json.dumps(config["finetune"]["eval"]),
        shards=heldout_shards,
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-eval --config-json {params.config:q} --set {wildcards.evalset} "
        "{params.shards}--out {params.out} > {log} 2>&1"


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
for table in PLAN.tables_of("finetune"):

    rule:
        name:
            table
        input:
            evals=wft.eval_paths(FINETUNE),
            # (metrics.jsonl: the check of the runs, analysis/comparable.py)
            runs=run_files(
                FINETUNE.run_dirs(), ("config.json", "eval.json", "metrics.jsonl")
            ),
        output:
            **table_outputs(table),
        log:
            f"logs/tables/{table}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            name=table,
            runs=run_dirs,
            out=table_stem,
            stamp=stamp_args,
        shell:
            "tapernorm make {params.name} --runs {params.runs} --evals {input.evals} "
            "--out {params.out} {params.stamp} > {log} 2>&1"
