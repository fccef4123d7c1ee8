# The learning-rate grid study (config/lr-grid.yaml, docs/norm-free.md): its runs are trained by
# rule train (family lr_grid); the summary is built when asked for by name:
#   snakemake --cores all results/lr_grid/lr_grid.json --configfile config/config.yaml config/lr-grid.yaml
# Included when the config has `lr_grid`.


rule lr_grid:
    input:
        runs=run_files(PLAN.lr_grid.run_dirs(), ("config.json", "eval.json")),
        data=PRETRAIN_DATA_FILES["meta"],  # the corpus, named in the summary's scale
    output:
        json=wp.LR_GRID_SUMMARY,
        csv=wp.LR_GRID_SUMMARY.replace(".json", ".csv"),
        md=wp.LR_GRID_SUMMARY.replace(".json", ".md"),
        marker=wf.set_marker(wp.LR_GRID_SUMMARY.removesuffix(".json")),
    log:
        "logs/lr_grid.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        shared_lr=config["pretrain"]["train"]["lr"],
        data=input_dir("data"),
        made_by=f"{RERUN_COMMAND} {wp.LR_GRID_SUMMARY}",
        out=output_dir("json"),
    shell:
        "tapernorm lr-grid --runs {params.runs} --shared-lr {params.shared_lr} "
        "--data {params.data} --made-by {params.made_by:q} --out {params.out} > {log} 2>&1"
