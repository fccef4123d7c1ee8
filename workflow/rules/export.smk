# Stock Hugging Face exports: the GPT-2 family's All-TaperLN runs as save_pretrained checkpoints,
# verified by loading them back with stock transformers (a mismatch fails the job).


rule export_hf_finetune:
    input:
        **FINETUNE_DATA_FILES,
        **model_files(run_dir("finetune", "{ftrun}")),
        eval=f"{run_dir('finetune', '{ftrun}')}/eval.json",
    output:
        verify="results/export/{ftrun}/verify.json",
    log:
        "logs/export/{ftrun}.log",
    wildcard_constraints:
        ftrun=wn.FOLDED_FINETUNE_RUN_WILDCARD,
    conda:
        "../envs/tapernorm.yaml"
    threads: 1
    resources:
        mem_mb=ft_job("export", "mem_mb"),
        runtime=ft_job("export", "runtime"),
    params:
        model=input_dir("eval"),
        data=input_dir("meta"),
        out=output_dir("verify"),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm export-hf --model {params.model} "
        "--data {params.data} --out {params.out} --device cpu > {log} 2>&1"
