# Inference benchmarks (paper Table 3, our decode protocol; fig5, claim 7) of the trained baseline and
# Internal-Taper (+aux) runs (and DyT, when pretrained) at the figure width, seed 0, which need the
# tapered run's fold verification to have passed (or been skipped: a run that diverged is not timed,
# the others are, and the CSV names it); or, with bench.random, of random-weight models at the
# paper's config. A benchmark takes every core, so no training job runs beside it on a CPU.
# Included when the config has `bench`.
BENCH = PLAN.bench


# what the benchmarks wait for (the timed runs' eval.json, the fold check) and the model files that
# each loads from each timed run
BENCH_INPUTS = BENCH.job_inputs()
# the timed runs' directories as options, with a trailing space (none with bench.random, which
# the --config-json section carries)
BENCH_MODELS = BENCH.model_options()


for kind in wb.BENCH_KINDS:

    rule:
        name:
            f"bench_{kind}"
        input:
            **BENCH_INPUTS,
        output:
            f"results/bench/{kind}.csv",
        log:
            f"logs/bench/{kind}.log",
        benchmark:
            wn.job_record(f"bench_{kind}")
        priority: priorities.BENCH
        conda:
            GPU_ENV
        threads: all_cores
        resources:
            gpu=BENCH.gpus(),
        params:
            kind=kind,
            gpus=gpu_claim(lambda w: BENCH.device),
            config=json.dumps(BENCH.job_config(kind)),
            models=BENCH_MODELS,
        shell:
            "OMP_NUM_THREADS={threads} {params.gpus} tapernorm bench {params.kind} "
            "--config-json {params.config:q} {params.models}--threads {threads} "
            "--out {output} > {log} 2>&1"


# (rule and table, its benchmark)
for bench_table, bench_kind in (("table3", "forward"), ("table_decode", "decode")):

    rule:
        name:
            bench_table
        input:
            f"results/bench/{bench_kind}.csv",
        output:
            **table_outputs(bench_table),
        log:
            f"logs/tables/{bench_table}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            name=bench_table,
            out=table_stem,
            stamp=stamp_args,
        shell:
            "tapernorm make {params.name} --bench {input} --out {params.out} "
            "{params.stamp} > {log} 2>&1"


rule fig5:
    input:
        "results/bench/decode.csv",
    output:
        **figure_outputs("fig5_decode_speedup"),
    log:
        "logs/figures/fig5_decode_speedup.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        stamp=stamp_args,
    shell:
        "tapernorm make fig5_decode_speedup --bench {input} {params.stamp} "
        "--out {output.pdf} > {log} 2>&1"
