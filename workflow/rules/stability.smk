# The stability study (config/stability.yaml, docs/stability.md): its runs are trained by rule
# train (family stability; the variants of one width and seed pair branch from one trunk), each
# run's records are copied to results/cpu/stability/runs/ (committed), and the summary is built
# from the stability family's records alone (rule stability_summary: the one-factor reruns are not
# its arms). A complete record of the config given depends on nothing, as the scaling study's
# (tapernorm.workflow.scaling.record_or_run), and the summary reads the records as ancient, as the
# scaling study's summary does:
#   snakemake --cores all stability --configfile config/config.yaml config/stability.yaml
# Included when the config has `stability`.
from tapernorm.cli.stability import SUMMARY_FILES as STABILITY_SUMMARY_FILES
from tapernorm.workflow import stability as wst

STABILITY_FAMILIES = [PLAN.stability, PLAN.stability_factors]


rule stability_record:
    input:
        lambda w: wst.record_inputs(wst.owner(STABILITY_FAMILIES, w.run), w.run),
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
        [f for fam in STABILITY_FAMILIES if fam for f in wst.records(fam)],
    conda:
        "../envs/tapernorm.yaml"


rule stability_summary:
    input:
        runs=ancient(wst.records(PLAN.stability)),
    output:
        **{
            f.replace(".", "_"): f"{wst.STABILITY_DIR}/{f}"
            for f in STABILITY_SUMMARY_FILES
        },
        marker=wf.set_marker(f"{wst.STABILITY_DIR}/summary"),
    log:
        "logs/stability/summary.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        made_by=f"{RERUN_COMMAND} stability",
        out=output_dir("summary_csv"),
    shell:
        "tapernorm stability summary --records {params.runs} --made-by {params.made_by:q} "
        "--out {params.out} > {log} 2>&1"


rule stability_factors:
    input:
        runs=ancient([f for fam in STABILITY_FAMILIES if fam for f in wst.records(fam)]),
    output:
        csv=f"{wst.STABILITY_DIR}/factors.csv",
        md=f"{wst.STABILITY_DIR}/factors.md",
        marker=wf.set_marker(f"{wst.STABILITY_DIR}/factors"),
    log:
        "logs/stability/factors.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        out=output_dir("csv"),
    shell:
        "tapernorm stability factors --records {params.runs} --out {params.out} > {log} 2>&1"


rule stability_manifest:
    input:
        ancient([f for fam in STABILITY_FAMILIES if fam for f in wst.records(fam)]),
        ancient(rules.stability_summary.output),
        ancient(rules.stability_factors.output) if PLAN.stability_factors else [],
    output:
        f"{wst.STABILITY_DIR}/manifest.json",
    log:
        "logs/stability/manifest.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        config=json.dumps(config),
        config_files=json.dumps(CONFIG_FILE_HASHES),
    shell:
        "tapernorm manifest {input} --config-json {params.config:q} "
        "--config-file-sha256 {params.config_files:q} --out {output} > {log} 2>&1"


rule stability:
    input:
        f"{wst.STABILITY_DIR}/manifest.json",
        # the output sets' markers, asked for here: Snakemake reruns a job for a missing output
        # only where a target asks for it (a set whose write stopped has none)
        rules.stability_summary.output.marker,
        rules.stability_factors.output.marker if PLAN.stability_factors else [],
    conda:
        "../envs/tapernorm.yaml"
