# The scale loss's dose-response (table_anchor; fig7 is drawn with the other figures): the
# ablation's runs and the anchor_sweep points. Included when the config sweeps.


rule anchor_table:
    input:
        runs=run_files(family_dirs(PLAN.ablation) + family_dirs(PLAN.sweep)),
    output:
        **table_outputs("table_anchor"),
    log:
        "logs/tables/table_anchor.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        out=table_stem,
        stamp=stamp_args,
    shell:
        "tapernorm make table_anchor --runs {params.runs} --out {params.out} "
        "{params.stamp} > {log} 2>&1"
