rule prepare_data:
    input:
        REHEARSAL_INPUTS,
    output:
        **PRETRAIN_DATA_FILES,
    log:
        "logs/prepare_data.log",
    conda:
        "../envs/tapernorm.yaml"
    params:
        args=tp.prepare_data_args(config["data"]),
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-data {params.args} --out {params.out} > {log} 2>&1"
