# One rule per table and per figure, named after it, so that each gets its own caption in the
# report. Tables, figures, claims and job times are local rules: on a cluster they run on the
# submitting host (a few seconds of CPU each) instead of waiting in the GPU partition's queue.
for table in PLAN.tables_of(""):

    rule:
        name:
            table
        input:
            runs=run_files(PLAN.pretrain.run_dirs()),
            data=PRETRAIN_DATA_FILES["meta"],  # the corpus' name, for Table 2's caption
        output:
            **table_outputs(table),
        log:
            f"logs/tables/{table}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            name=table,
            runs=run_dirs,
            out=table_stem,
            stamp=stamp_args,
        shell:
            "tapernorm make {params.name} --runs {params.runs} --out {params.out} "
            "{params.stamp} > {log} 2>&1"


for fig_name, fig_runs in FIGURES.items():

    rule:
        name:
            fig_name
        input:
            runs=run_files(fig_runs),
        output:
            **figure_outputs(fig_name),
        log:
            f"logs/figures/{fig_name}.log",
        localrule: True
        conda:
            "../envs/tapernorm.yaml"
        params:
            name=fig_name,
            runs=run_dirs,
            width=PLAN.figure_width(fig_name),
            stamp=stamp_args,
        shell:
            "tapernorm make {params.name} --runs {params.runs} --width {params.width} "
            "{params.stamp} --out {output.pdf} > {log} 2>&1"


rule claims:
    input:
        runs=run_files(PLAN.pretrain.run_dirs()),
        ablation=run_files(family_dirs(PLAN.ablation)),
        sweep=run_files(family_dirs(PLAN.sweep)),
        verify=PLAN.fold_verify() + PLAN.finetune_verify(),
        finetune=PLAN.finetune_evals(),
        bench=PLAN.bench_csvs(),
        bench_pool=bench_pool_input,  # the committed reference runs' (the speed rule)
        lr_grid=lr_grid_input,
        scaling=scaling_input,
        stability=stability_input,
        gpu=gpu_input,
        data=PRETRAIN_DATA_FILES["meta"],  # the corpus and vocabulary, for the scale card
        # the committed studies' set markers, which the command checks them against
        markers=lambda w: wf.set_markers(
            lr_grid_input(w) + scaling_input(w) + stability_input(w)
        ),
    output:
        md="results/claims.md",
        json="results/claims.json",
        marker=wf.set_marker("results/claims"),  # the three written as one set
        html=report(
            "results/claims.html", caption="../report/claims.rst", category="Claims"
        ),
    log:
        "logs/claims.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        runs=run_dirs,
        ablation=optional_files("--ablation-runs", "ablation", dirs_of),
        finetune=optional_files("--finetune-evals", "finetune"),
        sweep=optional_files("--sweep-runs", "sweep", dirs_of),
        bench=optional_files("--bench", "bench"),
        bench_pool=optional_files("--bench-pool", "bench_pool", dirs_of),
        lr_grid=optional_files("--lr-grid", "lr_grid"),
        scaling=optional_files("--scaling", "scaling"),
        stability=optional_files("--stability", "stability"),
        gpu=optional_files("--gpu", "gpu", lambda files: os.path.dirname(files[0])),
        stamp=stamp_args,
    shell:
        "tapernorm claims --runs {params.runs} {params.ablation} {params.sweep} "
        "--verify {input.verify} {params.finetune} {params.bench} {params.bench_pool} "
        "{params.lr_grid} "
        "{params.scaling} {params.stability} {params.gpu} --out {output.md} {params.stamp} "
        "> {log} 2>&1"


# the claims' paired gaps (claims 1, 2, DyT) from the numbers claims.json carries
rule fig_claim_gaps:
    input:
        json="results/claims.json",
        marker=wf.set_marker("results/claims"),  # (the command checks claims.json against it)
    output:
        **figure_outputs("fig_claim_gaps"),
    log:
        "logs/figures/fig_claim_gaps.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        name="fig_claim_gaps",
        stamp=stamp_args,
    shell:
        "tapernorm make {params.name} --claims {input.json} {params.stamp} --out {output.pdf} "
        "> {log} 2>&1"


# the committed LR grid as validation loss vs LR (a default target where the checkout has it)
rule fig_lr_grid:
    input:
        grid=lr_grid_input,
        marker=lambda w: wf.set_markers(lr_grid_input(w)),
    output:
        **figure_outputs("fig_lr_grid"),
    log:
        "logs/figures/fig_lr_grid.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        name="fig_lr_grid",
        stamp=stamp_args,
    shell:
        "tapernorm make {params.name} --lr-grid {input.grid} {params.stamp} --out {output.pdf} "
        "> {log} 2>&1"


rule job_times:
    input:
        PLAN.timed_jobs(),
    output:
        **table_outputs("job_times"),
    log:
        "logs/tables/job_times.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        records=job_records_dir,
        jobs=" ".join(PLAN.timed_jobs(root=None)),
        out=table_stem,
        stamp=stamp_args,
    shell:
        "tapernorm job-times {params.records} --jobs {params.jobs} --out {params.out} "
        "{params.stamp} > {log} 2>&1"


# The report's home page: what made the run, the scale card and the verdicts first (the Snakefile
# uses it as the report's home page once it exists)
rule report_home:
    input:
        json="results/claims.json",
        marker=wf.set_marker("results/claims"),
    output:
        wp.REPORT_HOME,
    log:
        "logs/report_home.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        rerun=RERUN_COMMAND,
    shell:
        "tapernorm report-home --claims {input.json} --rerun {params.rerun:q} --out {output} "
        "> {log} 2>&1"


# The run's manifest, its last job: what made it and the sha256 of every file it read and wrote
# (`tapernorm check-manifest results/manifest.json` checks a tree, or a copy, against it).
rule manifest:
    input:
        manifest_files,
    output:
        wp.MANIFEST,
    log:
        "logs/manifest.log",
    localrule: True
    conda:
        "../envs/tapernorm.yaml"
    params:
        config=json.dumps(config),
        config_files=json.dumps(CONFIG_FILE_HASHES),
    shell:
        "tapernorm manifest {input} --config-json {params.config:q} "
        "--config-file-sha256 {params.config_files:q} --out {output} > {log} 2>&1"
