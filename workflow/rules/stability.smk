# The stability study (config/stability.yaml, docs/stability.md): its runs are trained by rule
# train (family stability; the variants of one width and seed pair branch from one trunk), each
# run's records are copied to results/cpu/stability/runs/ (committed), and the summary is built
# from those records alone. A complete record of the config given depends on nothing, as the
# scaling study's (tapernorm.workflow.scaling.record_or_run):
#   snakemake --cores all stability --configfile config/config.yaml config/stability.yaml
# Included when the config has `stability`.
from tapernorm.workflow import stability as wst


rule stability_record:
    input:
        lambda w: PLAN.stability.record_inputs(w.run),
    output:
        **{
            f.split(".")[0]: f"{wst.STABILITY_DIR}/runs/{{run}}/{f}"
            for f in wst.RECORD_FILES
        },
    log:
        "logs/stability/record/{run}.log",
    priority: priorities.RECORD  # right after its run: its records are there to commit
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        run=lambda w: run_dir("stability", w.run),
        out=output_dir("eval"),
    shell:
        "tapernorm scaling record --run {params.run} --out {params.out} > {log} 2>&1"


rule stability_records:
    input:
        PLAN.stability.records(),
    conda:
        "../envs/tapernorm.yaml"
