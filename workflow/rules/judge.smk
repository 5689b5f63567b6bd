# The LLM judge: one job per cell of a judged dataset (config `datasets.<name>.judge`). Each job
# holds one unit of the resource `judge`, so `--resources judge=N` bounds the jobs that call the
# endpoint at once (slurm/config.yaml sets it; a local run is unbounded unless given). The judgement cache is shared by all judge jobs and
# reruns, and is no job's output: a directory where each job adds a shard of its own (written
# to a temp name, then renamed: no lock, safe on NFS and Lustre), so a rerun calls the judge only
# for answers not yet judged. A single-file cache.parquet of earlier versions is read beside it.

JUDGE_CACHE_DIR = "results/judge/cache"


rule judge:
    input:
        samples="results/generate/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/samples.parquet",
        prepared="results/prepared/{dataset}.parquet",
    output:
        "results/judge/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}/judgements.parquet",
    log:
        "logs/judge/dataset={dataset}/pair={pair}/method={method}/hp={hp}/seed={seed}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    resources:
        judge=1,
    params:
        template=lambda w: CONFIG["datasets"][w.dataset]["judge"],
        settings=lambda w: JudgeSettings.parse(CONFIG["judge"]).to_json(),
        cache=JUDGE_CACHE_DIR,
        code=fingerprint("judge"),
    shell:
        "mmspec judge --samples {input.samples} --prepared {input.prepared}"
        " --template {params.template} --settings {params.settings:q}"
        " --cache {params.cache} --out {output} 2> {log}"
