# The tails battery (`tapernorm tails`: tapernorm probe's battery, in the config's dtypes) of every
# pre-training run at the figure width and of the fold check's folded models, side by side:
# table_tails and its JSON record, which fig_tails draws. One job of one thread, on the pre-training
# runs' device (config tails: its windows, search budget and dtypes).


rule tails:
    input:
        **PRETRAIN_DATA_FILES,
        runs=run_files(PLAN.tails_runs(), wp.TAILS_RUN_FILES),
        folded=PLAN.tails_folded(),
        verify=PLAN.fold_verify(),  # (what a folded row says of a skipped fold)
    output:
        **table_outputs(wp.TAILS_TABLE),
        json=wp.TAILS_RECORD,
    log:
        f"logs/tables/{wp.TAILS_TABLE}.log",
    benchmark:
        wn.job_record("tails")
    priority: priorities.TAILS
    conda:
        GPU_ENV
    threads: 1
    resources:
        gpu=PLAN.tails_gpus(),
    params:
        runs=run_dirs,
        folded=optional_files("--folded", "folded"),
        data=input_dir("meta"),
        windows=PLAN.tails_settings()["windows"],
        budget=PLAN.tails_settings()["search_budget"],
        dtypes=" ".join(PLAN.tails_settings()["dtypes"]),
        device=PLAN.pretrain.device,
        gpus=gpu_claim(lambda w: PLAN.pretrain.device),
        out=table_stem,
        stamp=stamp_args,
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm tails --runs {params.runs} "
        "{params.folded} --data {params.data} --windows {params.windows} "
        "--search-budget {params.budget} --dtypes {params.dtypes} --device {params.device} "
        "--out {params.out} "
        "{params.stamp} > {log} 2>&1"


rule fig_tails:
    input:
        record=wp.TAILS_RECORD,
        marker=wf.set_marker(f"results/tables/{wp.TAILS_TABLE}"),
    output:
        **figure_outputs(wp.TAILS_FIGURE),
    log:
        f"logs/figures/{wp.TAILS_FIGURE}.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        name=wp.TAILS_FIGURE,
        stamp=stamp_args,
    shell:
        "tapernorm make {params.name} --tails {input.record} {params.stamp} --out {output.pdf} "
        "> {log} 2>&1"
