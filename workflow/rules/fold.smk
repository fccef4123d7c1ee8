# The fold check of a tapered run (claim 6): verify.json, or, for a run that diverged, a
# verify.json that says why the fold was skipped; folded/ holds the folded model (rule tails
# measures it), left empty when the fold was skipped.


rule fold:
    input:
        **PRETRAIN_DATA_FILES,
        **model_files(run_dir("pretrain", "{run}")),
        eval=f"{run_dir('pretrain', '{run}')}/eval.json",
    output:
        folded=directory("results/fold/{run}/folded"),
        verify="results/fold/{run}/verify.json",
    log:
        "logs/fold/{run}.log",
    conda:
        "../envs/tapernorm.yaml"
    threads: 1
    params:
        rtol=config["fold"]["rtol"],
        model=input_dir("eval"),
        data=input_dir("meta"),
        out=output_dir("verify"),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm fold --model {params.model} "
        "--data {params.data} --out {params.out} --rtol {params.rtol} "
        "--device cpu > {log} 2>&1"
