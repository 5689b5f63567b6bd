# The reproduction scorecard: each paper's claims (config/claims/*.yaml, inputs, so an edited
# claim reruns it) checked on the sweep's cells; the scorecard is also the job's log.


rule claims:
    input:
        cells="results/summary/cells.parquet",
        claims=SWEEP.claims_files,
    output:
        "results/summary/claims.parquet",
    log:
        "logs/claims.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        folder=CLAIMS_DIR,
        code=fingerprint("claims"),
    shell:
        "mmspec claims {input.cells} --claims {params.folder:q} --out {output} > {log} 2>&1"
