rule caption:
    input:
        prepared="results/prepared/{dataset}.parquet",
        model=lambda w: SWEEP.model_output(SWEEP.captioner["model"]),
    output:
        "results/captions/{model}/{dataset}.parquet",
    log:
        "logs/caption/{model}/{dataset}.log",
    # its wall time and memory, read by `mmspec plan` (device-hours per stage)
    benchmark:
        "results/benchmarks/caption/{model}/{dataset}.tsv"
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    resources:
        gpu=GPU_JOB,
        mem_mb=lambda w: SWEEP.captioner_memory().host_mb,
        gpu_mem_mb=lambda w: SWEEP.captioner_memory().gpu_mb,
    params:
        spec=lambda w: SWEEP.captioner_spec(),
        code=lambda w: SWEEP.model_code("caption", [SWEEP.captioner["model"]]),
    shell:
        "mmspec caption --spec {params.spec:q} --prepared {input.prepared}"
        " --threads {threads} --out {output} 2> {log}"
