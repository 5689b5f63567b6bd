rule score:
    input:
        unpack(judge_inputs),
        samples="results/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/samples.parquet",
        ar_samples=ar_samples,
        prepared="results/prepared/{dataset}.parquet",
        models=score_models,
    output:
        "results/score/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/scores.parquet",
    log:
        "logs/score/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        metric=dataset_metric,
        images=score_options,
        judged=judge_options,
        code=score_code,
    shell:
        "mmspec score --samples {input.samples} --ar-samples {input.ar_samples}"
        " --prepared {input.prepared} --metric {params.metric} {params.images}"
        " {params.judged} --out {output} 2> {log}"
