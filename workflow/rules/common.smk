# Helpers shared by the rules: the validated config, the cells, and their inputs.
import json
import shlex

from mmspec import cells as mmcells
from mmspec import config as mmconfig
from mmspec import cell_inputs, gpus, hub_needs, integrity, model_refs
from mmspec.claims.claim import CLAIMS_DIR
from mmspec.fingerprint import fingerprint
from mmspec.data import source as dataset_source
from mmspec.methods import components
from mmspec.models import footprint
from mmspec.models import source as model_source
from mmspec.scoring import metric_catalog
from mmspec.scoring.judge import reach as judge_reach
from mmspec.stages import toy_model
from mmspec.stages.claims import finished
from mmspec.stages.jobs import GenerateJob, TrainDrafterJob
from mmspec.stages.settings import Captioner, ImageModels, JudgeSettings

# Validation runs at parse time, so a bad config stops the run before any job starts.
try:
    CONFIG = mmconfig.validate(
        config, overrides=workflow.config_settings.overwrite_config
    )
except mmconfig.ConfigError as error:
    raise WorkflowError(f"invalid configuration: {error}")

# A workstation's GPUs (local execution): the resource `gpu` counts them, so at most one GPU
# job per GPU runs at once, and each GPU job takes a free GPU of its own (mmspec.gpus). With no
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
# the AR cell each cell is checked against: (dataset, pair, seed, temperature) -> AR cell
AR_CELLS = {
    (c.dataset, c.pair, c.seed, c.spec.temperature): c
    for c in CELLS.values()
    if c.spec.method == "ar"
}
# Every output of the sweep is a target of the run: Snakemake rebuilds a missing file only for
# a target or for a job that must run, so a cell's samples deleted under an up-to-date summary
# would otherwise stay missing while the report counted the cell.
SWEEP_OUTPUTS = cell_inputs.sweep_outputs(CONFIG, CELLS.values())
# A damaged output is set aside before the DAG is planned, and so rebuilt like a missing one
# (with what depends on it); jobs on cluster nodes read the Snakefile too, and leave this to the
# run that plans them.
if workflow.is_main_process:
    integrity.set_aside_damaged(SWEEP_OUTPUTS)


wildcard_constraints:
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    pair=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    method=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    hp=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    seed=r"\d+",
    model=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    name=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    kind=r"[a-z0-9_]+",


def cell_of(w):
    return CELLS[(w.dataset, w.pair, w.method, w.hp, w.seed)]


GENERATE_CODE = fingerprint("generate")
PREPARE_CODE = fingerprint("prepare")
TRAIN_DRAFTER_CODE = fingerprint("train_drafter")


def generate_code(w):
    """The generate stage's code fingerprint, with the source of the cell's plugin components
    and of the plugin sources of the models it loads."""
    cell = cell_of(w)
    refs = [
        ref
        for ref, _ in components.loaded_models(CONFIG["pairs"][cell.pair], cell.spec)
    ]
    return (
        GENERATE_CODE
        + components.plugin_code(cell.spec)
        + model_source.plugin_code(refs)
    )


def train_drafter_code(w):
    cell = head_cell(w)
    target = CONFIG["pairs"][cell.pair]["target"]
    return (
        TRAIN_DRAFTER_CODE
        + components.plugin_code(cell.spec)
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


def visual_path(ref, dataset):
    return cell_inputs.visual_path(ref, dataset)


def makes_images(dataset):
    return cell_inputs.makes_images(CONFIG, dataset)


def generate_inputs(w):
    cell = cell_of(w)
    inputs = cell_inputs.generate_inputs(CONFIG, cell)
    if cell.spec.method != "ar":  # the AR cell's tokens and timings: the reference
        inputs["ar_samples"] = ar_samples(w)
    return inputs


def generate_group(w):
    """The job group (slurm/config.yaml's group-components) of a generate job: "cells" for a
    method cell; none for an AR cell, whose samples the method cells read: a group takes in
    the jobs that depend on each other, so one AR cell in it would pack every cell of its
    dataset, pair and seed into one Slurm job."""
    return None if cell_of(w).spec.method == "ar" else "cells"


def generate_params(w):
    """The cell's job (stages.jobs.GenerateJob), as the JSON the generate stage reads."""
    cell = cell_of(w)
    task = mmconfig.dataset_task(CONFIG, cell.dataset)
    return GenerateJob.of_cell(CONFIG, cell, task).to_json()


def optional_inputs(w, input):
    """The options of a generate or train_drafter job for the inputs it reads when it has them
    (visual caches, captions, a trained head)."""
    args = []
    if "target_visual" in input.keys():
        args.append(f"--target-visual {input.target_visual}")
    if "draft_visual" in input.keys():
        args.append(f"--draft-visual {input.draft_visual}")
    if "captions" in input.keys():
        args.append(f"--captions {input.captions}")
    if "drafter" in input.keys():
        args.append(f"--drafter {input.drafter}")
    if "ar_samples" in input.keys():
        args.append(f"--ar-samples {input.ar_samples}")
    return " ".join(args)


def head_cell(w):
    return HEAD_CELLS[f"results/drafters/{w.pair}/{w.kind}/{w.hp}"]


def train_drafter_inputs(w):
    """A head trains on its `head_data` dataset, answered by the pair's target."""
    return cell_inputs.head_inputs(CONFIG, head_cell(w))


def train_drafter_params(w):
    """The head's job (stages.jobs.TrainDrafterJob), as the JSON the train_drafter stage reads."""
    cell = head_cell(w)
    task = mmconfig.dataset_task(CONFIG, cell.spec.head_training()["head_data"])
    return TrainDrafterJob.of_cell(CONFIG, cell, task).to_json()


def target_memory(w):
    pair = CONFIG["pairs"][w.pair]
    return footprint.job_memory([(pair["target"], pair["dtype"])], TOY_MODELS)


def ar_cell_of(w):
    """The AR cell the wildcards' cell is compared against (ar_cell raises, naming it)."""
    cell = cell_of(w)
    key = (cell.dataset, cell.pair, cell.seed, cell.spec.temperature)
    return AR_CELLS.get(key) or mmcells.ar_cell(CONFIG, cell)


def ar_samples(w):
    return cell_inputs.samples_path(ar_cell_of(w))


def prepare_spec(w):
    """The dataset's config entry as the prepare job reads it (JSON)."""
    entry = mmconfig.prepare_entry(CONFIG["datasets"][w.dataset])
    return json.dumps(entry, sort_keys=True)


def dataset_metric(w):
    spec = CONFIG["datasets"][w.dataset]
    if makes_images(w.dataset):
        return "image"
    return dataset_source.of(spec).metric(w.dataset, spec)


SCORE_CODE = fingerprint("score")


def score_code(w):
    """The score stage's code fingerprint, with the source of the dataset's metric when an
    installed plugin adds it."""
    code = SCORE_CODE + metric_catalog.plugin_code(dataset_metric(w))
    if makes_images(w.dataset):  # scored by the metric networks
        code += model_source.plugin_code(CONFIG["image_metrics"].values())
    return code


def score_models(w):
    """Image generation is scored with the metric networks."""
    return cell_inputs.score_models(CONFIG, w.dataset)


def score_options(w):
    if not makes_images(w.dataset):
        return ""
    models = ImageModels.parse(CONFIG["image_metrics"]).to_json()
    return f"--image-models {shlex.quote(models)}"


def judge_inputs(w):
    """A judged dataset's score reads the judgements of the cell and of its AR cell."""
    if not cell_inputs.judged(CONFIG, w.dataset):
        return {}
    return {
        "judgements": cell_inputs.judgements_path(cell_of(w)),
        "ar_judgements": cell_inputs.judgements_path(ar_cell_of(w)),
    }


def judge_options(w, input):
    if "judgements" not in input.keys():
        return ""
    return f"--judgements {input.judgements} --ar-judgements {input.ar_judgements}"


def score_files():
    return [cell_inputs.scores_path(c) for c in CELLS.values()]


# Memory requests (resources mem_mb, gpu_mem_mb) from the sizes of the models a job loads; a
# profile's set-resources for the rule overrides them.
def generate_memory(w):
    cell = cell_of(w)
    pair = CONFIG["pairs"][cell.pair]
    return footprint.job_memory(components.loaded_models(pair, cell.spec), TOY_MODELS)


def model_memory(w):
    return footprint.job_memory([MODELS[w.model]], TOY_MODELS)


def captioner_memory(w):
    return footprint.job_memory([(CAPTIONER["model"], CAPTIONER["dtype"])], TOY_MODELS)


def refuse_unreachable_judge(local_exec):
    """Judge jobs on compute nodes (a cluster executor) cannot call a judge served on this
    machine's localhost: stop before any job, saying what to do (scoring.judge.reach).
    """
    judged = mmconfig.judged_datasets(CONFIG, list(CELLS.values()))
    if not judged:
        return
    try:
        judge_reach.check_reachable(CONFIG["judge"]["endpoint"], judged, local_exec)
    except ValueError as error:
        raise WorkflowError(f"invalid configuration: {error}")


def refuse_unfetched(local_exec):
    """Jobs on compute nodes (a cluster executor, unless HF_HUB_OFFLINE=0 is set) or run with
    HF_HUB_OFFLINE=1 read hub models and datasets from the Hugging Face cache only: a cache
    lacking any of them stops the run before any job, naming them (mmspec.hub_needs)."""
    configs = " ".join(str(f) for f in workflow.configfiles) or "config/config.yaml"
    try:
        hub_needs.before_jobs(CONFIG, list(CELLS.values()), local_exec, configs)
    except ValueError as error:
        raise WorkflowError(error)
