rule caption:
    input:
        prepared="results/prepared/{dataset}.parquet",
        model=lambda w: model_output(CAPTIONER["model"]),
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
        mem_mb=lambda w: captioner_memory(w).host_mb,
        gpu_mem_mb=lambda w: captioner_memory(w).gpu_mb,
    params:
        spec=lambda w: Captioner.parse(CAPTIONER).to_json(),
        code=lambda w: model_code("caption", [CAPTIONER["model"]]),
    shell:
        "mmspec caption --spec {params.spec:q} --prepared {input.prepared}"
        " --threads {threads} --out {output} 2> {log}"
