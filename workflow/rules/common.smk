# The sweep as the rules read it (mmspec.dag.sweep_dag): the DAG's wiring only.
import sys

from mmspec.claims.claim import CLAIMS_DIR
from mmspec.dag.sweep_dag import SweepDag
from mmspec.search import rounds as search_rounds
from mmspec.stages import toy_model
from mmspec.stages.claims import finished
from mmspec.sweep import config as mmconfig
from mmspec.sweep import search_runs
from mmspec.workflow import batches, gpus
from mmspec.workflow.fingerprint import fingerprint

# Validation runs at parse time, so a bad config stops the run before any job starts.
try:
    CONFIG = mmconfig.validate(
        config, overrides=workflow.config_settings.overwrite_config
    )
except mmconfig.ConfigError as error:
    said = mmconfig.from_sources(
        error, workflow.configfiles, bool(workflow.config_settings.config)
    )
    raise WorkflowError(f"invalid configuration: {said}")

# A workstation's GPUs (local execution): the resource `gpu` counts them, so at most one GPU
# job per GPU runs at once, and each GPU job takes a free GPU of its own (mmspec.workflow.gpus).
# With no GPU, or under a cluster executor (Slurm assigns GPUs), GPU jobs hold no such resource.
LOCAL_GPUS = gpus.share_local(workflow)
GPU_JOB = 1 if LOCAL_GPUS else 0

SWEEP = SweepDag(CONFIG)
# Damaged outputs and stale batch records go before the DAG is planned. Jobs on cluster nodes
# read the Snakefile too, and leave this to the run that plans them.
if workflow.is_main_process:
    for line in SWEEP.heal():
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


def optional_inputs(w, input):
    """The options of a train_drafter job for the inputs it reads when it has them."""
    names = ("target_visual", "draft_visual", "captions")
    given = [name for name in names if name in input.keys()]
    return " ".join(
        f"--{name.replace('_', '-')} {getattr(input, name)}" for name in given
    )


# A batch's inputs, spec, job group (slurm/config.yaml's group-components: "cells" for a
# method's generate batch, none for an AR batch, whose samples the method cells read) and memory
def batch_inputs(stage):
    return lambda w: list(SWEEP.batch(stage, w.batch).inputs)


def batch_spec(stage):
    return lambda w: SWEEP.batch(stage, w.batch).spec_path


def batch_host_mb(stage):
    return lambda w: SWEEP.batch(stage, w.batch).host_mb


def batch_gpu_mb(stage):
    return lambda w: SWEEP.batch(stage, w.batch).gpu_mb


# The searches' rounds are checkpoints: what waits on them asks Snakemake for their files.
def round_file(search, number):
    return checkpoints.search_round.get(search=search, round=number).output[0]


def search_round_inputs(w):
    """Round r waits for round r - 1's file and its cells' scores (its history; the earlier
    rounds' through round r - 1's own inputs)."""
    number = int(w.round)
    if number == 1:
        return []
    # the checkpoint first: until round r - 1 is written, its cells are not known
    previous = round_file(w.search, number - 1)
    return [previous, *SWEEP.rounds.round(w.search, number - 1).score_records]


def search_outputs(w):
    """Each search's last round and its cells' scores: targets of the run, so a summary from
    before the search was added is not taken as current."""
    files = []
    for search_id, run in SWEEP.rounds.runs.items():
        last = run.search.rounds
        files += [
            round_file(search_id, last),
            *SWEEP.rounds.round(search_id, last).score_records,
        ]
    return files


def summary_inputs(w):
    """The score records of the grid's cells and of every round of every search (the summary
    waits until each search's rounds are all proposed)."""
    files = list(SWEEP.grid_score_records)
    for search_id, run in SWEEP.rounds.runs.items():
        last = run.search.rounds
        files.append(round_file(search_id, last))
        for number in range(1, last + 1):
            files += SWEEP.rounds.round(search_id, number).score_records
    return list(dict.fromkeys(files))
