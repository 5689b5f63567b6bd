rule toy_model:
    output:
        directory("results/models/toy/{name}"),
    log:
        "logs/toy_model/{name}.log",
    priority: lambda w: toy_model.priority(SWEEP.toy_models[w.name], w.name)
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        spec=lambda w: SWEEP.toy_recipe(w.name),
        seed=CONFIG["toy"]["seed"],
        code=fingerprint("toy_model"),
    shell:
        "mmspec toy_model --name {wildcards.name} --spec {params.spec:q} --seed {params.seed}"
        " --threads {threads} --out {output} 2> {log}"
