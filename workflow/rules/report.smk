# As for aggregate: the trained heads are inputs, and `mmspec report --sweep` finds their
# folders from the config, so the command stays the same size however many the sweep trains.


rule report:
    input:
        cells="results/summary/cells.parquet",
        blocks="results/summary/blocks.parquet",
        claims="results/summary/claims.parquet",
        heads=sorted(SWEEP.head_cells),
    output:
        report("reports/index.html", caption="../report/index.rst", category="Report"),
    log:
        "logs/report.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        # a function: Snakemake would read the braces of a JSON string as wildcards
        sweep=lambda w: SWEEP.sweep_json(),
        code=fingerprint("report"),
    shell:
        "mmspec report --cells {input.cells} --blocks {input.blocks} --claims {input.claims}"
        " --sweep {params.sweep:q} --out {output} 2> {log}"
