# Stock Hugging Face exports: the GPT-2 family's All-TaperLN runs as save_pretrained checkpoints,
# verified by loading them back with stock transformers (a mismatch fails the job).


rule export_hf_finetune:
    input:
        **FINETUNE_DATA_FILES,
        **model_files("results/runs/finetune/{ftrun}"),
        eval="results/runs/finetune/{ftrun}/eval.json",
    output:
        verify="results/export/{ftrun}/verify.json",
    log:
        "logs/export/{ftrun}.log",
    wildcard_constraints:
        ftrun=r"all_taperln-[a-z0-9][a-z0-9.\-]*",
    conda:
        "../envs/tapernorm.yaml"
    threads: 1
    resources:
        mem_mb=lambda w: ft_spec(w)["mem_mb"],
    params:
        model=lambda w, input: os.path.dirname(input.eval),
        data=lambda w, input: os.path.dirname(input.meta),
        out=lambda w, output: os.path.dirname(output.verify),
    shell:
        "OMP_NUM_THREADS={threads} tapernorm export-hf --model {params.model} "
        "--data {params.data} --out {params.out} --device cpu > {log} 2>&1"
