rule prepare:
    input:
        dataset_inputs,
    output:
        "results/prepared/{dataset}.parquet",
    log:
        "logs/prepare/{dataset}.log",
    # first: a second each, and everything of its dataset waits on it
    priority: 100
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        spec=prepare_spec,
        toy_seed=CONFIG["toy"]["seed"],
        code=prepare_code,
    shell:
        "mmspec prepare --name {wildcards.dataset} --spec {params.spec:q}"
        " --toy-seed {params.toy_seed} --out {output} 2> {log}"
