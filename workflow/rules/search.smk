# A searched method's rounds (mmspec.search): round r's points come from the finished cells of
# the rounds before it, so each round is a checkpoint, and the DAG grows by its cells once its
# file is written. Cheap (an optimizer's ask), so it runs where Snakemake runs, not queued.
localrules:
    search_round,


checkpoint search_round:
    input:
        search_round_inputs,
    output:
        "results/search/{search}/round-{round}.json",
    log:
        "logs/search/{search}/round-{round}.log",
    conda:
        "../../envs/mmspec.yaml"
    threads: 1
    params:
        # a function: Snakemake would read the braces of a JSON string as wildcards
        key=lambda w: SWEEP.search_round_key(w.search),
        size=lambda w: SWEEP.search_round_size(w.search, int(w.round)),
        sweep=search_rounds.SWEEP_FILE,
        code=fingerprint("search_round"),
    shell:
        "mmspec search_round --sweep-file {params.sweep} --search {wildcards.search}"
        " --round {wildcards.round} --size {params.size} --out {output} 2> {log}"
