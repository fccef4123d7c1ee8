# Every training family's runs (pretrain, ablation, anchor_sweep, lr_grid): one job per run, its
# config from its family (tapernorm.workflow), results/runs/<family>/<run>/.


rule train:
    input:
        **PRETRAIN_DATA_FILES,
    output:
        eval=f"{run_dir('{family}', '{run}')}/eval.json",
        config=f"{run_dir('{family}', '{run}')}/config.json",
        model=f"{run_dir('{family}', '{run}')}/model.safetensors",
        metrics=f"{run_dir('{family}', '{run}')}/metrics.jsonl",
    log:
        "logs/runs/{family}/{run}.log",
    benchmark:
        wn.job_record("train", "{family}", "{run}")
    priority: TRAIN.priority
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=TRAIN.gpus,
        runtime=TRAIN.minutes,
    params:
        run=lambda w: TRAIN.run_config(w).to_json(),
        gpus=gpu_claim(TRAIN.device),
        out=output_dir("eval"),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm train --config-json {params.run:q} "
        "--out {params.out} > {log} 2>&1"
