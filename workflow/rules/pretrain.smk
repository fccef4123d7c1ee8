# Every training family's runs (pretrain, ablation, anchor_sweep, lr_grid, the scaling and stability
# studies'): one job per run, its config from its family (tapernorm.workflow), in
# results/runs/<family>/<run>/. Runs that differ only in their variant branch from their trunk (the
# steps before the taper, trained once by rule trunk into results/trunks/<trunk>/:
# tapernorm.workflow.trunks). The runs, as a table: `tapernorm runs-sheet` (each job reads its run's
# row: common.smk's TRAIN); rule runs expands over it.


rule trunk:
    input:
        **PRETRAIN_DATA_FILES,
    output:
        **trunk_files("{trunk}"),
    log:
        "logs/trunks/{trunk}.log",
    benchmark:
        wn.job_record("trunk", "{trunk}")
    priority: priorities.TRUNK
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=TRAIN.trunk_gpus,
    params:
        run=lambda w: TRAIN.trunk_config(w).to_json(),
        gpus=gpu_claim(TRAIN.trunk_device),
        out=lambda w: trunk_dir(w.trunk),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm train --trunk --config-json "
        "{params.run:q} --out {params.out} > {log} 2>&1"


rule train:
    input:
        unpack(TRAIN.trunk_input),
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


# Every run of the sheet and nothing else (`snakemake --cores all runs`): rule train's jobs, one
# per row of `tapernorm runs-sheet`, and the trunks they branch from.
rule runs:
    input:
        expand(
            f"{run_dir('{family}', '{run}')}/eval.json",
            zip,
            family=TRAIN.column("family"),
            run=TRAIN.column("run"),
        ),
    conda:
        "../envs/tapernorm.yaml"
