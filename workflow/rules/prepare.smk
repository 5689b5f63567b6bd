rule prepare:
    input:
        lambda w: SWEEP.dataset_inputs(w.dataset),
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
        spec=lambda w: SWEEP.prepare_spec(w.dataset),
        toy_seed=CONFIG["toy"]["seed"],
        code=lambda w: SWEEP.prepare_code(w.dataset),
    shell:
        "mmspec prepare --name {wildcards.dataset} --spec {params.spec:q}"
        " --toy-seed {params.toy_seed} --out {output} 2> {log}"
