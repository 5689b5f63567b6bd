rule train_drafter:
    input:
        unpack(lambda w: SWEEP.train_drafter_inputs(w.pair, w.kind, w.hp)),
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
        mem_mb=lambda w: SWEEP.target_memory(w.pair).host_mb,
        gpu_mem_mb=lambda w: SWEEP.target_memory(w.pair).gpu_mb,
    params:
        head=lambda w: SWEEP.train_drafter_params(w.pair, w.kind, w.hp),
        optional=optional_inputs,
        code=lambda w: SWEEP.train_drafter_code(w.pair, w.kind, w.hp),
    shell:
        "mmspec train_drafter --params {params.head:q} --prepared {input.prepared}"
        " {params.optional} --threads {threads} --out {output} 2> {log}"
