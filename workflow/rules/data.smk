rule prepare_data:
    input:
        REHEARSAL_INPUTS,
    output:
        **PRETRAIN_DATA_FILES,
    log:
        "logs/prepare_data.log",
    priority: priorities.PREPARE
    conda:
        "../envs/tapernorm.yaml"
    threads: all_cores  # tokenizing processes (a cluster profile sets its own: set-threads)
    params:
        config=json.dumps(config["data"]),
        out=output_dir("meta"),
    shell:
        "tapernorm prepare-data --config-json {params.config:q} --workers {threads} "
        "--out {params.out} > {log} 2>&1"
