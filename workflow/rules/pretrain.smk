rule train:
    input:
        **PRETRAIN_DATA_FILES,
    output:
        eval="results/runs/{family}/{run}/eval.json",
        config="results/runs/{family}/{run}/config.json",
        model="results/runs/{family}/{run}/model.safetensors",
        metrics="results/runs/{family}/{run}/metrics.jsonl",
    log:
        "logs/runs/{family}/{run}.log",
    benchmark:
        f"{JOB_RECORDS}/train/{{family}}/{{run}}.tsv"
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=lambda w: int(tp.wants_gpu(config, w.family)),
        runtime=lambda w: tp.train_runtime(config, w.family, w.run),
    params:
        run=lambda w: json.dumps(tp.run_config(config, w.family, w.run, PRETRAIN_DATA)),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm train --config-json {params.run:q} "
        "--out results/runs/{wildcards.family}/{wildcards.run} > {log} 2>&1"
