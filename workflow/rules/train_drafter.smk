rule train_drafter:
    input:
        unpack(train_drafter_inputs),
    output:
        directory("results/drafters/{pair}/{kind}/{hp}"),
    log:
        "logs/train_drafter/{pair}/{kind}/{hp}.log",
    # its wall time and memory, read by `mmspec plan` (device-hours per stage)
    benchmark:
        "results/benchmarks/train_drafter/{pair}/{kind}/{hp}.tsv"
    # before cells: its head's cells wait on it, and it is among the longest jobs
    priority: 50
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    resources:
        gpu=GPU_JOB,
        mem_mb=lambda w: target_memory(w).host_mb,
        gpu_mem_mb=lambda w: target_memory(w).gpu_mb,
    params:
        head=train_drafter_params,
        optional=optional_inputs,
        code=train_drafter_code,
    shell:
        "mmspec train_drafter --params {params.head:q} --prepared {input.prepared}"
        " {params.optional} --threads {threads} --out {output} 2> {log}"
