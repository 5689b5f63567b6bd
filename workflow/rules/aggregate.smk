rule aggregate:
    input:
        score_files(),
    output:
        cells=report(
            "results/summary/cells.parquet",
            caption="../report/cells.rst",
            category="Summary",
        ),
        blocks="results/summary/blocks.parquet",
    log:
        "logs/aggregate.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        groups=dataset_groups(),
        code=fingerprint("aggregate"),
    shell:
        "mmspec aggregate --out {output.cells} --blocks {output.blocks}"
        " --groups {params.groups:q} {input} 2> {log}"
