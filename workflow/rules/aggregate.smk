rule aggregate:
    input:
        score_files(),
    output:
        report(
            "results/summary/cells.parquet",
            caption="../report/cells.rst",
            category="Summary",
        ),
    params:
        code=fingerprint("aggregate"),
    log:
        "logs/aggregate.log",
    threads: 1
    shell:
        "mmspec aggregate --out {output} {input} 2> {log}"
