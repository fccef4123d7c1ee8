# The fold check of a tapered run (claim 6): verify.json, or, for a run that diverged, a
# verify.json that says why the fold was skipped.


rule fold:
    input:
        **PRETRAIN_DATA_FILES,
        **model_files("results/runs/pretrain/{run}"),
        eval="results/runs/pretrain/{run}/eval.json",
    output:
        verify="results/fold/{run}/verify.json",
    log:
        "logs/fold/{run}.log",
    conda:
        "../envs/tapernorm.yaml"
    threads: 1
    params:
        rtol=config["fold"]["rtol"],
        data=input_dir("meta"),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm fold --model results/runs/pretrain/{wildcards.run} "
        "--data {params.data} --out results/fold/{wildcards.run} --rtol {params.rtol} "
        "--device cpu > {log} 2>&1"
