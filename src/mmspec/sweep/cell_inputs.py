"""The files a cell's generate job and a trained head's job read, and those a sweep's jobs
write, by path: one place for the workflow's rules (mmspec.dag.sweep_dag) and for `mmspec
plan`, which counts the jobs of each stage a sweep still has to run from the same paths."""

from __future__ import annotations

from mmspec.data.media import IMAGE_GENERATION
from mmspec.decoding.component import CAPTIONS, DRAFT_MODEL, DRAFT_VISUAL
from mmspec.sweep import cells as mmcells
from mmspec.sweep import model_refs
from mmspec.sweep.config_checks import dataset_judge, dataset_task


def prepared_path(dataset: str) -> str:
    return f"results/prepared/{dataset}.parquet"


def visual_path(ref: str, dataset: str) -> str:
    return f"results/visual/{mmcells.model_slug(ref)}/{dataset}.parquet"


def captions_path(config: dict, dataset: str) -> str:
    return f"results/captions/{mmcells.model_slug(config['captioner']['model'])}/{dataset}.parquet"


def samples_path(cell) -> str:
    return f"results/generate/{cell.path}/samples.parquet"


def judgements_path(cell) -> str:
    return f"results/judge/{cell.path}/judgements.parquet"


def scores_path(cell) -> str:
    return f"results/score/{cell.path}/scores.parquet"


# what the aggregate, claims and report jobs write
SUMMARY_OUTPUTS = (
    "results/summary/cells.parquet",
    "results/summary/blocks.parquet",
    "results/summary/claims.parquet",
    "reports/index.html",
)


def model_output(ref: str) -> list[str]:
    """The rule output a model reference needs (a toy model's training), or nothing for hub and
    local models (the model source says: mmspec.models.source)."""
    folder = model_refs.workflow_output(ref)
    return [folder] if folder else []


def makes_images(config: dict, dataset: str) -> bool:
    return dataset_task(config, dataset) == IMAGE_GENERATION


def needs_draft_visual(config: dict, cell) -> bool:
    """A draft model's views over visual tokens read its own visual cache."""
    return cell.spec.needs(DRAFT_VISUAL) and not makes_images(config, cell.dataset)


def needs_captions(config: dict, cell) -> bool:
    return cell.spec.needs(CAPTIONS) and not makes_images(config, cell.dataset)


def generate_inputs(config: dict, cell) -> dict:
    """What a cell's generate job reads, but the AR cell's samples (the workflow adds them)."""
    pair = config["pairs"][cell.pair]
    inputs = {"prepared": prepared_path(cell.dataset), "models": model_output(pair["target"])}
    if not makes_images(config, cell.dataset):  # image generation's prompts are captions
        inputs["target_visual"] = visual_path(pair["target"], cell.dataset)
    if cell.spec.needs(DRAFT_MODEL):
        inputs["models"] = inputs["models"] + model_output(pair["draft"])
    if mmcells.drafter_dir(cell):
        inputs["drafter"] = mmcells.drafter_dir(cell)
    if needs_draft_visual(config, cell):
        inputs["draft_visual"] = visual_path(pair["draft"], cell.dataset)
    if needs_captions(config, cell):
        inputs["captions"] = captions_path(config, cell.dataset)
    return inputs


def head_data(cell) -> str:
    """The dataset a cell's trained head learns from."""
    return cell.spec.head_training()["head_data"]


def datasets_read(cells) -> list[str]:
    """The datasets `cells` read, in order: their own, and those their heads learn from."""
    names: list[str] = []
    for cell in cells:
        for name in (cell.dataset, cell.spec.head_training().get("head_data")):
            if name and name not in names:
                names.append(name)
    return names


def head_inputs(config: dict, cell) -> dict:
    """What the job training a cell's head reads: its `head_data` dataset, answered by the
    pair's target."""
    target = config["pairs"][cell.pair]["target"]
    data = head_data(cell)
    inputs = {"prepared": prepared_path(data), "models": model_output(target)}
    if not makes_images(config, data):  # image generation's prompts are captions
        inputs["target_visual"] = visual_path(target, data)
    return inputs


def judged(config: dict, dataset: str) -> bool:
    return dataset_judge(config, dataset) is not None


def score_models(config: dict, dataset: str) -> list[str]:
    """The rule outputs an image generation cell's scoring reads (the metric networks)."""
    if not makes_images(config, dataset):
        return []
    return [d for ref in config["image_metrics"].values() for d in model_output(ref)]


def upstream_outputs(config: dict, cells) -> list[str]:
    """Every file and folder the jobs before the cells' write for a sweep of `cells`, each once
    (models, prepared datasets, visual caches and captions, heads), then the summary and report:
    with the cells' batches (`mmspec.workflow.batches`), the workflow's targets, so that a missing
    one is rebuilt, and what it checks for damage before a run (`mmspec.storage.integrity`)."""
    upstream: dict[str, None] = {}
    captioner = config.get("captioner") or {}
    done: set[tuple] = set()
    for cell in cells:
        shared = (cell.dataset, cell.pair, cell.method, cell.hp)  # the seeds read the same
        if shared in done:
            continue
        done.add(shared)
        inputs = generate_inputs(config, cell)
        if "drafter" in inputs:
            for paths in head_inputs(config, cell).values():
                upstream.update(dict.fromkeys(paths if isinstance(paths, list) else [paths]))
        if "captions" in inputs:
            upstream.update(dict.fromkeys(model_output(captioner["model"])))
        for paths in inputs.values():
            upstream.update(dict.fromkeys(paths if isinstance(paths, list) else [paths]))
        upstream.update(dict.fromkeys(score_models(config, cell.dataset)))
    return [*upstream, *SUMMARY_OUTPUTS]
