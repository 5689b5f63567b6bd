rule generate:
    input:
        unpack(generate_inputs),
    output:
        "results/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/samples.parquet",
    log:
        "logs/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}.log",
    # its wall time and memory, read by `mmspec plan` (device-hours per stage)
    benchmark:
        "results/benchmarks/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}.tsv"
    group:
        generate_group
    conda:
        "../../envs/mmspec.yaml"
    threads: CONFIG["timing"]["threads"]
    resources:
        gpu=GPU_JOB,
        mem_mb=lambda w: generate_memory(w).host_mb,
        gpu_mem_mb=lambda w: generate_memory(w).gpu_mb,
    params:
        cell=generate_params,
        optional=optional_inputs,
        code=generate_code,
    shell:
        "mmspec generate --params {params.cell:q} --prepared {input.prepared}"
        " {params.optional} --out {output} 2> {log}"
