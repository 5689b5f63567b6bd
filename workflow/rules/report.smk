rule report:
    input:
        cells="results/summary/cells.parquet",
        blocks="results/summary/blocks.parquet",
        heads=sorted(HEAD_CELLS),
    output:
        report("reports/index.html", caption="../report/index.rst", category="Report"),
    log:
        "logs/report.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        code=fingerprint("report"),
    shell:
        "mmspec report --cells {input.cells} --blocks {input.blocks} --heads {input.heads}"
        " --out {output} 2> {log}"
