rule report:
    input:
        "results/summary/cells.parquet",
    output:
        report("reports/index.html", caption="../report/index.rst", category="Report"),
    params:
        code=fingerprint("report"),
    log:
        "logs/report.log",
    threads: 1
    shell:
        "mmspec report --cells {input} --out {output} 2> {log}"
