# The LLM judge: the cells of a judged dataset (config `datasets.<name>.judge`), in batches as
# cells are decoded (generate.smk). Each job holds one unit of the resource `judge`, so
# `--resources judge=N` bounds the jobs that call the endpoint at once (slurm/config.yaml sets
# it; a local run is unbounded unless given). The judgement cache (results/judge/cache) is shared
# by all judge jobs and reruns, and is no job's output: a directory where each job adds a shard of
# its own (written to a temp name, then renamed: no lock, safe on NFS and Lustre), so a rerun
# calls the judge only for answers not yet judged.


rule judge:
    input:
        batch_inputs("judge"),
    output:
        "results/batches/judge/{batch}/done.json",
    log:
        "logs/batches/judge/{batch}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    resources:
        judge=1,
    params:
        spec=batch_spec("judge"),
    shell:
        "mmspec batch --spec {params.spec} --out {output} 2> {log}"
