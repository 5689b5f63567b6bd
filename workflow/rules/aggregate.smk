# The score batches' records are inputs (the DAG waits for each and reruns on changes), but the
# command names no file: Linux refuses a command argument over 128 KiB, which a list of a few
# thousand paths exceeds. `mmspec aggregate --sweep` derives exactly the sweep's score files
# from the validated config, a few KB whatever the cell count.


rule aggregate:
    input:
        summary_inputs,
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
        # a function: Snakemake would read the braces of a JSON string as wildcards
        sweep=lambda w: SWEEP.sweep_json(),
        code=fingerprint("aggregate"),
    shell:
        "mmspec aggregate --out {output.cells} --blocks {output.blocks}"
        " --sweep {params.sweep:q} 2> {log}"
