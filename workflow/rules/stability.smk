# The stability study (config/stability.yaml, docs/stability.md): its runs are trained by rule
# train (family stability; the variants of one width and seed pair branch from one trunk), each
# run's records are copied to results/cpu/stability/runs/ (committed), and the summary is built
# from those records alone. A complete record of the config given depends on nothing, as the
# scaling study's (tapernorm.workflow.scaling.record_or_run):
#   snakemake --cores all stability --configfile config/config.yaml config/stability.yaml
# Included when the config has `stability`.
from tapernorm.workflow import stability as wst

STABILITY_FAMILIES = [PLAN.stability, PLAN.stability_factors]


rule stability_record:
    input:
        lambda w: wst.owner(STABILITY_FAMILIES, w.run).record_inputs(w.run),
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
        run=lambda w: wst.owner(STABILITY_FAMILIES, w.run).run_dir(w.run),
        out=output_dir("eval"),
    shell:
        "tapernorm scaling record --run {params.run} --out {params.out} > {log} 2>&1"


rule stability_records:
    input:
        [f for fam in STABILITY_FAMILIES if fam for f in fam.records()],
    conda:
        "../envs/tapernorm.yaml"
