rule generate:
    input:
        unpack(generate_inputs),
    output:
        "results/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/samples.parquet",
    params:
        cell=generate_params,
        draft_visual=draft_visual_arg,
        code=fingerprint("generate"),
    log:
        "logs/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}.log",
    threads: CONFIG["timing"]["threads"]
    shell:
        "mmspec generate --params {params.cell:q} --prepared {input.prepared}"
        " --target-visual {input.target_visual} {params.draft_visual}"
        " --out {output} 2> {log}"
