# The scaling study (config/scaling.yaml, docs/scaling.md): its runs are trained by rule train
# (families scaling and scaling_ablation; a cell that is exactly a pretrain run is that run), each
# run's records are copied to results/cpu/scaling/runs/ (committed), and the summary, figures and
# manifest are built from those records alone. A complete record of the config given depends on
# nothing (scaling_record_source), and what is built from the records reads them as ancient:
# neither a fresh clone's file times, which follow the checkout's order, nor a tree where the
# default ran replans anything; a record or output that a job remakes still remakes what reads it:
#   snakemake --cores all scaling --configfile config/config.yaml config/scaling.yaml
# Included when the config has `scaling`.


wildcard_constraints:
    sfamily="scaling|scaling_ablation",
    sfigure="|".join(SCALING_FIGURES),


rule scaling_record:
    input:
        scaling_record_source,
    output:
        **{
            f.split(".")[0]: f"{wsc.SCALING_DIR}/runs/{{sfamily}}/{{run}}/{f}"
            for f in wsc.RECORD_FILES
        },
    log:
        "logs/scaling/record/{sfamily}/{run}.log",
    priority: priorities.RECORD  # right after its run: its records are there to commit
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        run=scaling_record_run,
        out=output_dir("eval"),
    shell:
        "tapernorm scaling record --run {params.run} --out {params.out} > {log} 2>&1"


rule scaling_summary:
    input:
        runs=ancient(SCALING_RECORDS),
        extra=ancient(SCALING_EXTRA_RECORDS),
    output:
        **{f.replace(".", "_"): f"{wsc.SCALING_DIR}/{f}" for f in SCALING_SUMMARY_FILES},
        marker=wf.set_marker(f"{wsc.SCALING_DIR}/summary"),
    log:
        "logs/scaling/summary.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        made_by=f"{RERUN_COMMAND} scaling",
        extra=optional_files("--extra-records", "extra", dirs_of),
        out=output_dir("summary_csv"),
    shell:
        "tapernorm scaling summary --records {params.runs} {params.extra} "
        "--made-by {params.made_by:q} --out {params.out} > {log} 2>&1"


rule scaling_figure:
    input:
        runs=ancient(SCALING_RECORDS),
        summary=ancient(f"{wsc.SCALING_DIR}/summary.csv"),
    output:
        pdf=f"{wsc.SCALING_DIR}/{{sfigure}}.pdf",
        png=f"{wsc.SCALING_DIR}/{{sfigure}}.png",
        html=f"{wsc.SCALING_DIR}/{{sfigure}}.html",
        marker=wf.set_marker(f"{wsc.SCALING_DIR}/{{sfigure}}"),
    log:
        "logs/scaling/{sfigure}.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        out=lambda wildcards, output: output.pdf.removesuffix(".pdf"),
        stamp=stamp_args,
    shell:
        "tapernorm scaling figure {wildcards.sfigure} --records {params.runs} "
        "--summary {input.summary} {params.stamp} --out {params.out} > {log} 2>&1"


rule scaling_manifest:
    input:
        ancient(SCALING_RECORDS),
        ancient(SCALING_EXTRA_RECORDS),
        ancient(expand(f"{wsc.SCALING_DIR}/{{f}}", f=SCALING_SUMMARY_FILES)),
        ancient(wf.set_marker(f"{wsc.SCALING_DIR}/summary")),
        ancient(
            expand(
                f"{wsc.SCALING_DIR}/{{fig}}.{{ext}}",
                fig=SCALING_FIGURES,
                ext=("pdf", "png", "set.json"),
            )
        ),
    output:
        f"{wsc.SCALING_DIR}/manifest.json",
    log:
        "logs/scaling/manifest.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        config=json.dumps(config),
        config_files=json.dumps(CONFIG_FILE_HASHES),
    shell:
        "tapernorm manifest {input} --config-json {params.config:q} "
        "--config-file-sha256 {params.config_files:q} --out {output} > {log} 2>&1"


rule scaling:
    input:
        f"{wsc.SCALING_DIR}/manifest.json",
        # the output sets' markers, asked for here: Snakemake reruns a job for a missing output
        # only where a target asks for it (a set whose write stopped has none)
        wf.set_marker(f"{wsc.SCALING_DIR}/summary"),
        expand(f"{wsc.SCALING_DIR}/{{fig}}.set.json", fig=SCALING_FIGURES),
    conda:
        "../envs/tapernorm.yaml"
