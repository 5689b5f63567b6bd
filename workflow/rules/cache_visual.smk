rule cache_visual:
    input:
        prepared="results/prepared/{dataset}.parquet",
        model=lambda w: toy_dir(REFS[w.model]),
    output:
        "results/visual/{model}/{dataset}.parquet",
    log:
        "logs/cache_visual/{model}/{dataset}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        ref=lambda w: REFS[w.model],
        dtype=lambda w: MODEL_DTYPES[w.model],
        code=fingerprint("cache_visual"),
    shell:
        "mmspec cache_visual --model {params.ref:q} --dtype {params.dtype}"
        " --prepared {input.prepared} --threads {threads} --out {output} 2> {log}"
