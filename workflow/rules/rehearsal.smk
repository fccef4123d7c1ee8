# A rehearsal of the paper path (config/rehearsal.yaml): offline stand-ins of the paper's data sets
# and GPT-2 checkpoints, which the data and fine-tuning rules wait for (REHEARSAL_INPUTS).
# Included when the config rehearses.


rule rehearsal_inputs:
    output:
        standins=REHEARSAL_INPUTS[0],
    log:
        "logs/rehearsal_inputs.log",
    conda:
        "../envs/tapernorm.yaml"
    params:
        out=output_dir("standins"),
        seed=config["rehearsal"]["seed"],
    shell:
        "tapernorm rehearsal-inputs --out {params.out} --seed {params.seed} > {log} 2>&1"
