# Inference benchmarks (paper Table 3, our decode protocol; fig5, claim 7) of the trained baseline and
# Internal-Taper (+aux) runs (and DyT, when pretrained) at the figure width, seed 0, which need the
# tapered run's fold verification to have passed (or been skipped: a run that diverged is not timed,
# the others are, and the CSV names it); or, with bench.random, of random-weight models at the
# paper's config. A benchmark takes every core, so no training job runs beside it on a CPU.


rule bench_forward:
    input:
        unpack(bench_inputs),
    output:
        "results/bench/forward.csv",
    log:
        "logs/bench/forward.log",
    benchmark:
        tp.job_record("bench_forward")
    conda:
        GPU_ENV
    threads: all_cores
    resources:
        gpu=BENCH_GPU,
    params:
        gpus=gpu_claim(bench_device),
        models=bench_models,
        grid=bench_grid("forward"),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm bench forward {params.models} "
        "{params.grid} --threads {threads} --out {output} > {log} 2>&1"


rule bench_decode:
    input:
        unpack(bench_inputs),
    output:
        "results/bench/decode.csv",
    log:
        "logs/bench/decode.log",
    benchmark:
        tp.job_record("bench_decode")
    conda:
        GPU_ENV
    threads: all_cores
    resources:
        gpu=BENCH_GPU,
    params:
        gpus=gpu_claim(bench_device),
        models=bench_models,
        grid=bench_grid("decode"),
    shell:
        "OMP_NUM_THREADS={threads} {params.gpus} tapernorm bench decode {params.models} "
        "{params.grid} --threads {threads} --out {output} > {log} 2>&1"


rule table3:
    input:
        "results/bench/forward.csv",
    output:
        csv="results/tables/table3.csv",
        md="results/tables/table3.md",
        tex="results/tables/table3.tex",
        html=report(
            "results/tables/table3.html",
            caption="../report/table3.rst",
            category="Tables",
        ),
    log:
        "logs/tables/table3.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        stamp=STAMP_ARGS,
    shell:
        "tapernorm table 3 --bench {input} --out results/tables/table3 "
        "{params.stamp} > {log} 2>&1"


rule table_decode:
    input:
        "results/bench/decode.csv",
    output:
        csv="results/tables/table_decode.csv",
        md="results/tables/table_decode.md",
        tex="results/tables/table_decode.tex",
        html=report(
            "results/tables/table_decode.html",
            caption="../report/table_decode.rst",
            category="Tables",
        ),
    log:
        "logs/tables/table_decode.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        stamp=STAMP_ARGS,
    shell:
        "tapernorm table decode --bench {input} --out results/tables/table_decode "
        "{params.stamp} > {log} 2>&1"


rule fig5:
    input:
        "results/bench/decode.csv",
    output:
        pdf="figures/fig5_decode_speedup.pdf",
        png="figures/fig5_decode_speedup.png",
        html=report(
            "figures/fig5_decode_speedup.html",
            caption="../report/fig5_decode_speedup.rst",
            category="Figures",
        ),
    log:
        "logs/figures/fig5_decode_speedup.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        stamp=STAMP_ARGS,
    shell:
        "tapernorm figure fig5 --bench {input} {params.stamp} "
        "--out {output.pdf} > {log} 2>&1"
