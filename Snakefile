# mmspec: speculative-decoding sweeps for multimodal models. The DAG only; logic is in src/mmspec.
import os

from mmspec.sweep.config import is_whole_sweep

# A config given with --configfile that declares `datasets`, `pairs` and `methods` is a whole
# sweep and replaces the default; otherwise --config / --configfile values override the default
# sweep's keys (the default beside this Snakefile, whatever --directory the run works in).
if not is_whole_sweep(config):

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/report.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/toy_model.smk"
include: "workflow/rules/cache_visual.smk"
include: "workflow/rules/caption.smk"
include: "workflow/rules/train_drafter.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/judge.smk"
include: "workflow/rules/score.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/report.smk"


# Every output of the sweep, upstream files included: a missing or damaged one is rebuilt by
# the same command line (common.smk).
rule all:
    default_target: True
    input:
        SWEEP.outputs,
        search_outputs,


# Before any job, once the executor is known (it is not while the Snakefile is read); a dry run
# runs none of this.
onstart:
    gpus.unshare_for_cluster(workflow.local_exec)
    try:
        SWEEP.before_jobs(workflow.local_exec, [str(f) for f in workflow.configfiles])
    except ValueError as error:
        raise WorkflowError(error)


onsuccess:
    print(finished("results/summary/claims.parquet", "reports/index.html"))
