rule table:
    input:
        runs=run_files(pretrain_evals()),
        data=PRETRAIN_DATA_FILES["meta"],  # the corpus' name, for Table 2's caption
    output:
        csv="results/tables/table{n}.csv",
        md="results/tables/table{n}.md",
        tex="results/tables/table{n}.tex",
        html=report(
            "results/tables/table{n}.html",
            caption="../report/tables.rst",
            category="Tables",
        ),
    log:
        "logs/tables/table{n}.log",
    wildcard_constraints:
        n="[125]",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=lambda w, input: dirs_of(input.runs),
    shell:
        "tapernorm table {wildcards.n} --runs {params.runs} "
        "--out results/tables/table{wildcards.n} > {log} 2>&1"


rule anchor_table:
    input:
        run_files(anchor_sweep_evals()),
    output:
        csv="results/tables/table_anchor.csv",
        md="results/tables/table_anchor.md",
        tex="results/tables/table_anchor.tex",
        html=report(
            "results/tables/table_anchor.html",
            caption="../report/table_anchor.rst",
            category="Tables",
        ),
    log:
        "logs/tables/table_anchor.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=lambda w, input: dirs_of(input),
    shell:
        "tapernorm table anchor --runs {params.runs} --out results/tables/table_anchor "
        "> {log} 2>&1"


# One rule per figure, named after it, so that each gets its own caption in the report.
# Tables, figures, claims and job times are local rules: on a cluster they run on the submitting
# host (a few seconds of CPU each) instead of waiting in the GPU partition's queue.
for fig_name, fig_runs in FIGURES.items():

    rule:
        name:
            fig_name
        input:
            run_files(fig_runs),
        output:
            pdf=f"figures/{fig_name}.pdf",
            png=report(
                f"figures/{fig_name}.png",
                caption=f"../report/{fig_name}.rst",
                category="Figures",
            ),
        log:
            f"logs/figures/{fig_name}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            kind=fig_name.split("_")[0],
            runs=lambda w, input: dirs_of(input),
            width=FIG_WIDTH,
        shell:
            "tapernorm figure {params.kind} --runs {params.runs} --width {params.width} "
            "--out {output.pdf} > {log} 2>&1"


rule claims:
    input:
        runs=run_files(pretrain_evals()),
        ablation=run_files(ablation_evals()),
        sweep=run_files(evals(tp.SWEEP_FAMILY, tp.sweep_runs(config) if SWEEP else [])),
        verify=expand("results/fold/{run}/verify.json", run=fold_names())
        + finetune_verify(),
        finetune=finetune_evals(),
        bench=BENCH_CSVS,
    output:
        md="results/claims.md",
        html=report(
            "results/claims.html", caption="../report/claims.rst", category="Claims"
        ),
    log:
        "logs/claims.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=lambda w, input: dirs_of(input.runs),
        ablation=lambda w, input: (
            f"--ablation-runs {dirs_of(input.ablation)}" if input.ablation else ""
        ),
        finetune=lambda w, input: (
            f"--finetune-evals {' '.join(input.finetune)}" if input.finetune else ""
        ),
        sweep=lambda w, input: (
            f"--sweep-runs {dirs_of(input.sweep)}" if input.sweep else ""
        ),
        bench=lambda w, input: f"--bench {' '.join(input.bench)}" if input.bench else "",
    shell:
        "tapernorm claims --runs {params.runs} {params.ablation} {params.sweep} "
        "--verify {input.verify} {params.finetune} {params.bench} --out {output.md} "
        "> {log} 2>&1"


rule job_times:
    input:
        [f"{JOB_RECORDS}/{record}" for record in timed_jobs()],
    output:
        csv="results/tables/job_times.csv",
        md="results/tables/job_times.md",
        tex="results/tables/job_times.tex",
        html=report(
            "results/tables/job_times.html",
            caption="../report/job_times.rst",
            category="Tables",
        ),
    log:
        "logs/tables/job_times.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        records=JOB_RECORDS,
        jobs=" ".join(timed_jobs()),
        out=lambda w, output: output.csv[: -len(".csv")],
    shell:
        "tapernorm job-times {params.records} --jobs {params.jobs} --out {params.out} "
        "> {log} 2>&1"
