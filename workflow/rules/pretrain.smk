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
        tp.job_record("train", "{family}", "{run}")
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=train_gpus,
        runtime=train_minutes,
    params:
        run=train_json,
        gpus=gpu_claim(train_device),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm train --config-json {params.run:q} "
        "--out results/runs/{wildcards.family}/{wildcards.run} > {log} 2>&1"
