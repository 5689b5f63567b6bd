# Cells are decoded in batches (mmspec.workflow.batches): one job per batch of up to `batch_cells` cells of
# one dataset, pair, method and seed; each cell is rerun by its own key, and logs to
# logs/generate/<cell>.log as `mmspec generate` would.
rule generate:
    input:
        batch_inputs("generate"),
    output:
        "results/batches/generate/{batch}/done.json",
    log:
        "logs/batches/generate/{batch}.log",
    group:
        lambda w: SWEEP.batch("generate", w.batch).group
    conda:
        "../../envs/mmspec.yaml"
    threads: CONFIG["timing"]["threads"]
    resources:
        gpu=GPU_JOB,
        mem_mb=batch_host_mb("generate"),
        gpu_mem_mb=batch_gpu_mb("generate"),
    params:
        spec=batch_spec("generate"),
    shell:
        "mmspec batch --spec {params.spec} --out {output} 2> {log}"
