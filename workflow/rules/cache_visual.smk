rule cache_visual:
    input:
        prepared="results/prepared/{dataset}.parquet",
        model=lambda w: SWEEP.model_output(SWEEP.models[w.model][0]),
    output:
        "results/visual/{model}/{dataset}.parquet",
    log:
        "logs/cache_visual/{model}/{dataset}.log",
    # its wall time and memory, read by `mmspec plan` (device-hours per stage)
    benchmark:
        "results/benchmarks/cache_visual/{model}/{dataset}.tsv"
    # before cells: a few seconds, and every cell of its dataset waits on it
    priority: 50
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    resources:
        gpu=GPU_JOB,
        mem_mb=lambda w: SWEEP.model_memory(w.model).host_mb,
        gpu_mem_mb=lambda w: SWEEP.model_memory(w.model).gpu_mb,
    params:
        ref=lambda w: SWEEP.models[w.model][0],
        dtype=lambda w: SWEEP.models[w.model][1],
        code=lambda w: SWEEP.model_code("cache_visual", [SWEEP.models[w.model][0]]),
    shell:
        "mmspec cache_visual --model {params.ref:q} --dtype {params.dtype}"
        " --prepared {input.prepared} --threads {threads} --out {output} 2> {log}"
