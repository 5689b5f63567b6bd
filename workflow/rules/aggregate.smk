rule aggregate:
    input:
        score_files(),
    output:
        report(
            "results/summary/cells.parquet",
            caption="../report/cells.rst",
            category="Summary",
        ),
    log:
        "logs/aggregate.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        code=fingerprint("aggregate"),
    shell:
        "mmspec aggregate --out {output} {input} 2> {log}"
