# Helpers shared by the rules: the validated config, the cells, and their inputs.
import json
import sys

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.workflow import batches, gpus
from mmspec.sweep import cell_inputs, config_checks, model_refs
from mmspec.planning import hub_needs
from mmspec.storage import integrity
from mmspec.claims.claim import CLAIMS_DIR
from mmspec.workflow.fingerprint import fingerprint
from mmspec.data import source as dataset_source
from mmspec.methods import components
from mmspec.models import footprint
from mmspec.models import source as model_source
from mmspec.scoring.judge import reach as judge_reach
from mmspec.search import rounds as search_rounds
from mmspec.sweep import search_runs
from mmspec.stages import toy_model
from mmspec.stages.claims import finished
from mmspec.sweep.jobs import TrainDrafterJob
from mmspec.sweep.settings import Captioner

# Validation runs at parse time, so a bad config stops the run before any job starts.
try:
    CONFIG = mmconfig.validate(
        config, overrides=workflow.config_settings.overwrite_config
    )
except mmconfig.ConfigError as error:
    raise WorkflowError(f"invalid configuration: {error}")

# A workstation's GPUs (local execution): the resource `gpu` counts them, so at most one GPU
# job per GPU runs at once, and each GPU job takes a free GPU of its own (mmspec.workflow.gpus). With no
# GPU, or under a cluster executor (Slurm assigns GPUs), GPU jobs hold no such resource.
LOCAL_GPUS = gpus.share_local(workflow)
GPU_JOB = 1 if LOCAL_GPUS else 0

CELLS = {
    (c.dataset, c.pair, c.method, c.hp, str(c.seed)): c for c in mmcells.cells(CONFIG)
}
# model slug -> (reference, dtype) for every model a pair names
MODELS = {
    mmcells.model_slug(p[role]): (p[role], p["dtype"])
    for p in CONFIG["pairs"].values()
    for role in ("target", "draft")
    if role in p
}
CAPTIONER = CONFIG.get("captioner")
TOY_MODELS = CONFIG["toy"]["models"]
# the claims files (rule claims reads them all)
CLAIMS_FILES = sorted(str(p) for p in CLAIMS_DIR.glob("*.yaml"))
# a trained head's folder -> one cell drafting with it (they share its training hyperparameters)
HEAD_CELLS = {
    mmcells.drafter_dir(c): c for c in CELLS.values() if mmcells.drafter_dir(c)
}
# The per-cell stages run in batches of cells (mmspec.workflow.batches); each batch's record is a target.
BATCH_OF = batches.partition(CELLS.values(), CONFIG["batch_cells"])
BATCHES = batches.of_sweep(CONFIG, CELLS.values(), BATCH_OF)
GRID_SCORE_RECORDS = batches.records(BATCHES, ["score"])
# A searched entry's cells come in rounds (mmspec.search): those of the rounds proposed so far
# are batched here like the grid's; a round proposed during the run joins the DAG when its
# checkpoint (search.smk) has written it.
ROUNDS = search_rounds.Rounds(CONFIG, CELLS.values(), BATCH_OF)
for _round in ROUNDS.proposed(fresh=True):
    for _stage, _table in _round.batches.items():
        BATCHES[_stage].update(_table)
# Every output of the sweep is a target of the run: Snakemake rebuilds a missing file only for
# a target or for a job that must run, so an upstream output deleted under an up-to-date summary
# would otherwise stay missing while the report counted it. A search's corner cells stand for
# the upstream outputs its rounds' cells read.
SWEEP_OUTPUTS = [
    *cell_inputs.upstream_outputs(
        CONFIG, [*CELLS.values(), *search_runs.corner_cells(CONFIG)]
    ),
    *batches.records(BATCHES),
]
# A damaged output is set aside before the DAG is planned, and so rebuilt like a missing one
# (with what depends on it); a batch record whose cells' outputs were since deleted or changed is
# removed, so that the batch runs again. Jobs on cluster nodes read the Snakefile too, and leave
# this to the run that plans them (which writes the batches' specs as its jobs start: onstart).
if workflow.is_main_process:
    integrity.set_aside_damaged(SWEEP_OUTPUTS)
    for line in batches.stale_records(BATCHES):
        print(line, file=sys.stderr)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    pair=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    hp=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    seed=r"\d+",
    model=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    name=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    kind=r"[a-z0-9_]+",
    batch=batches.ID_PATTERN,
    search=search_runs.ID_PATTERN,
    round=r"\d+",


PREPARE_CODE = fingerprint("prepare")
TRAIN_DRAFTER_CODE = fingerprint("train_drafter")


def train_drafter_code(w):
    cell = head_cell(w)
    target = CONFIG["pairs"][cell.pair]["target"]
    return (
        TRAIN_DRAFTER_CODE
        + cell.spec.plugin_code()
        + model_source.plugin_code([target])
    )


def dataset_inputs(w):
    """The local files a dataset's source prepares it from (none for hub and toy datasets)."""
    entry = CONFIG["datasets"][w.dataset]
    return dataset_source.of(entry).inputs(w.dataset, entry)


def prepare_code(w):
    """The prepare stage's code fingerprint, with the dataset's source when a plugin adds it."""
    return PREPARE_CODE + dataset_source.plugin_code(CONFIG["datasets"][w.dataset])


MODEL_STAGE_CODE = {stage: fingerprint(stage) for stage in ("cache_visual", "caption")}


def model_code(stage, refs):
    """`stage`'s code fingerprint (read once per parse, not per job), with the plugin sources
    of the models `refs`."""
    return MODEL_STAGE_CODE[stage] + model_source.plugin_code(refs)


def model_output(ref):
    return cell_inputs.model_output(ref)


def optional_inputs(w, input):
    """The options of a train_drafter job for the inputs it reads when it has them."""
    args = []
    if "target_visual" in input.keys():
        args.append(f"--target-visual {input.target_visual}")
    if "draft_visual" in input.keys():
        args.append(f"--draft-visual {input.draft_visual}")
    if "captions" in input.keys():
        args.append(f"--captions {input.captions}")
    return " ".join(args)


def head_cell(w):
    return HEAD_CELLS[f"results/drafters/{w.pair}/{w.kind}/{w.hp}"]


def train_drafter_inputs(w):
    """A head trains on its `head_data` dataset, answered by the pair's target."""
    return cell_inputs.head_inputs(CONFIG, head_cell(w))


def train_drafter_params(w):
    """The head's job (stages.jobs.TrainDrafterJob), as the JSON the train_drafter stage reads."""
    cell = head_cell(w)
    task = config_checks.dataset_task(CONFIG, cell.spec.head_training()["head_data"])
    return TrainDrafterJob.of_cell(CONFIG, cell, task).to_json()


def target_memory(w):
    pair = CONFIG["pairs"][w.pair]
    return footprint.job_memory([(pair["target"], pair["dtype"])], TOY_MODELS)


def prepare_spec(w):
    """The dataset's config entry as the prepare job reads it (JSON)."""
    entry = mmconfig.prepare_entry(CONFIG["datasets"][w.dataset])
    return json.dumps(entry, sort_keys=True)


def batch(stage, batch_id):
    """A batch of `stage`: the grid's, or one of a round proposed during this run (whose spec
    is written here, as its cells join the DAG: a dry run proposes no round)."""
    found = BATCHES[stage].get(batch_id)
    if found is None:
        found = ROUNDS.batch(stage, batch_id)
        batches.write_specs({stage: {batch_id: found}})
        BATCHES[stage][batch_id] = found
    return found


# Memory requests (resources mem_mb, gpu_mem_mb) from the sizes of the models a job loads; a
# profile's set-resources for the rule overrides them.
def batch_inputs(stage):
    """The files a batch of `stage` waits for (its cells' inputs, and the batches they read)."""
    return lambda w: list(batch(stage, w.batch).inputs)


def batch_spec(stage):
    return lambda w: batch(stage, w.batch).spec_path


def batch_group(w):
    """The job group (slurm/config.yaml's group-components) of a generate batch: "cells" for
    a method's; none for an AR batch, whose samples the method cells read: a group takes in the
    jobs that depend on each other, so one AR batch in it would pack every batch of its dataset,
    pair and seed into one Slurm job."""
    return batch("generate", w.batch).group


def batch_host_mb(stage):
    return lambda w: batch(stage, w.batch).host_mb


def batch_gpu_mb(stage):
    return lambda w: batch(stage, w.batch).gpu_mb


def search_round_inputs(w):
    """Round r of a search waits for round r - 1's file and its cells' scores (its history;
    the earlier rounds' through round r - 1's own inputs)."""
    number = int(w.round)
    if number == 1:
        return []
    previous = checkpoints.search_round.get(search=w.search, round=number - 1).output[0]
    return [previous, *ROUNDS.round(w.search, number - 1).score_records]


def search_outputs(w):
    """Each search's last round and its cells' scores (the rounds before it are its inputs):
    targets of the run, so a summary from before the search was added is not taken as current.
    """
    files = []
    for search_id, run in ROUNDS.runs.items():
        last = run.search.rounds
        files.append(
            checkpoints.search_round.get(search=search_id, round=last).output[0]
        )
        files += ROUNDS.round(search_id, last).score_records
    return files


def summary_inputs(w):
    """The score records of the grid's cells and of every round of every search (each search's
    last round is a checkpoint: the summary waits until the rounds are all proposed)."""
    files = list(GRID_SCORE_RECORDS)
    for search_id, run in ROUNDS.runs.items():
        last = run.search.rounds
        files.append(
            checkpoints.search_round.get(search=search_id, round=last).output[0]
        )
        for number in range(1, last + 1):
            files += ROUNDS.round(search_id, number).score_records
    return list(dict.fromkeys(files))


def search_round_key(w):
    """What decides a round's points besides its history (its inputs) and its size (a param of
    its own): the search as defined (not its budget: a larger budget only adds rounds), the
    sweep's seeds and temperature.
    """
    run = ROUNDS.runs[w.search]
    key = {
        "search": run.search.definition(),
        "seeds": CONFIG["seeds"],
        "temperature": CONFIG["generation"]["temperature"],
    }
    return json.dumps(key, sort_keys=True)


def model_memory(w):
    return footprint.job_memory([MODELS[w.model]], TOY_MODELS)


def captioner_memory(w):
    return footprint.job_memory([(CAPTIONER["model"], CAPTIONER["dtype"])], TOY_MODELS)


def refuse_unreachable_judge(local_exec):
    """Judge jobs on compute nodes (a cluster executor) cannot call a judge served on this
    machine's localhost: stop before any job, saying what to do (scoring.judge.reach).
    """
    judged = config_checks.judged_datasets(CONFIG, list(CELLS.values()))
    if not judged:
        return
    try:
        judge_reach.check_reachable(CONFIG["judge"]["endpoint"], judged, local_exec)
    except ValueError as error:
        raise WorkflowError(f"invalid configuration: {error}")


def refuse_unfetched(local_exec):
    """Jobs on compute nodes (a cluster executor, unless HF_HUB_OFFLINE=0 is set) or run with
    HF_HUB_OFFLINE=1 read hub models and datasets from the Hugging Face cache only: a cache
    lacking any of them stops the run before any job, naming them (mmspec.planning.hub_needs)."""
    configs = " ".join(str(f) for f in workflow.configfiles) or "config/config.yaml"
    try:
        hub_needs.before_jobs(CONFIG, list(CELLS.values()), local_exec, configs)
    except ValueError as error:
        raise WorkflowError(error)
