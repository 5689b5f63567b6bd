# Scored in batches, as cells are decoded (generate.smk).
rule score:
    input:
        batch_inputs("score"),
    output:
        "results/batches/score/{batch}/done.json",
    log:
        "logs/batches/score/{batch}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        spec=batch_spec("score"),
    shell:
        "mmspec batch --spec {params.spec} --out {output} 2> {log}"
