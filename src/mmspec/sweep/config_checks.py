"""The checks across a sweep's sections that run before any job, each raising a ConfigError
naming the config key: each dataset as its source reads it and its task metric, each cell's
models, rules and heads (`check_cell`), the judge, the image metrics, what a search measures;
and what they read of a dataset (`dataset_task`, `judged_datasets`, `never_measured`)."""

from __future__ import annotations

from mmspec.data import source as dataset_source
from mmspec.data.media import IMAGE_GENERATION
from mmspec.decoding.component import (
    CODEBOOK,
    HIDDEN_STATES,
    TRAINED_HEAD,
    TargetFacts,
)
from mmspec.methods import components
from mmspec.models.source import IMAGE_GENERATOR
from mmspec.schema import ConfigError
from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import TEXT
from mmspec.sweep import search_runs
from mmspec.sweep.cells import cells
from mmspec.sweep.model_refs import (
    checked_model_ref,
    codebook,
    language_layers,
    model_kind,
)
from mmspec.sweep.settings import JudgeSettings


def never_measured(config: dict, dataset: str, metric: str) -> str | None:
    """Why the cells table never holds `metric` (a cells-table column) on `dataset`, or None:
    FID only where the dataset makes images, the judge's only where it is judged."""
    if metric.startswith("fid") and dataset_task(config, dataset) != IMAGE_GENERATION:
        return "FID is measured on image generation datasets only"
    if metric.startswith("judge_") and not dataset_judge(config, dataset):
        return "it is measured on judged datasets only (a `judge:` template)"
    return None


def check_search_metrics(config: dict) -> None:
    """A search's objectives and constraints are measured on each dataset it runs on."""
    for run in search_runs.runs(config):
        metrics = [o.metric for o in run.search.objectives]
        metrics += [c.metric for c in run.search.constraints]
        for metric in metrics:
            why = never_measured(config, run.dataset, metric)
            if why:
                raise ConfigError(
                    f"config key methods.{run.search.name}.search: {metric!r} is never measured "
                    f"on dataset {run.dataset!r}, where the sweep runs this search: {why}"
                )


def check_datasets(config: dict) -> None:
    """Each dataset entry as its source's prepare job will read it (a Hugging Face entry's
    required columns, a toy scenario that exists), before any job rather than when its prepare
    job runs; and a source's `size_key` a key its entries may hold (`mmspec pilot` writes it)."""
    for name, spec in config["datasets"].items():
        source = dataset_source.of(spec)
        declared = source.entry_schema().get("properties", {})
        if source.size_key is not None and source.size_key not in declared:
            raise ConfigError(
                f"config key datasets.{name}: dataset source {source.kind!r} caps its entries "
                f"by {source.size_key!r} (its size_key), a key its entry_schema does not declare"
            )
        try:
            source.check(name, spec)
        except ValueError as error:
            raise ConfigError(f"config key datasets.{name}: {error}") from None


def check_task_metrics(config: dict) -> None:
    """Each dataset's task metric (its source's: an entry's `metric`, or the toy world's) names
    a metric of the catalog (mmspec's, or an installed plugin's) that can score it."""
    for name, entry in config["datasets"].items():
        if dataset_task(config, name) == IMAGE_GENERATION:
            continue  # FID and CLIP score
        source = dataset_source.of(entry)
        key = f"config key datasets.{name}.metric"
        try:
            metric = metric_catalog.get(source.metric(name, entry))
        except (metric_catalog.CatalogError, ValueError) as error:
            raise ConfigError(f"{key}: {error}") from None
        if not metric.higher_is_better:
            raise ConfigError(
                f"{key}: metric {metric.name!r} falls as quality rises, but retention (quality / "
                "AR quality) and the report read quality as rising (score its complement instead)"
            )
        if source.has_second_turns(name, entry) and TEXT not in metric.takes:
            raise ConfigError(
                f"{key}: metric {metric.name!r} takes a list of answers, but each turn of a "
                "conversation has one answer text"
            )


def judged_datasets(config: dict, swept: list | None = None) -> list[str]:
    """The swept datasets (of `swept`, the config's cells) that name a judge template."""
    datasets = {c.dataset for c in (cells(config) if swept is None else swept)}
    return sorted(d for d in datasets if dataset_judge(config, d))


def check_judge(config: dict, swept: list) -> None:
    judged = judged_datasets(config, swept)
    if judged and config.get("judge") is None:
        raise ConfigError(
            f"config key judge: datasets {judged} are scored by an LLM judge (`judge:`) but the "
            "config has no judge block (judge: {endpoint: embedded | <base URL>, model: ...})"
        )
    embedded = bool(judged) and JudgeSettings.parse(config["judge"]).embedded
    for name in judged:
        entry = config["datasets"][name]
        source = dataset_source.of(entry)
        if embedded and source.rubric is None:
            raise ConfigError(
                f"config key datasets.{name}.judge: the embedded judge (judge.endpoint: "
                "embedded) grades with the exact rubric of a dataset source (the toy world's), "
                f"and dataset source {source.kind!r} declares none, so its grades would mean "
                "nothing; point judge.endpoint at an OpenAI-protocol server"
            )
        if source.judge(name, entry) == "vdc" and not source.has_qa(name, entry):
            raise ConfigError(
                f"config key datasets.{name}.judge: template vdc asks each sample's questions "
                f"(the PREPARED `qa` field), which dataset source {source.kind!r} does not "
                "carry for this entry (an hf entry maps them with columns.qa, a column of "
                "{question, answer} lists; a source of one's own fills `qa` and answers True "
                "from has_qa); template vdd grades the answer against the reference alone"
            )
    images = [d for d in judged if dataset_task(config, d) == IMAGE_GENERATION]
    if images:
        raise ConfigError(
            f"config key datasets.{images[0]}.judge: an image-generation dataset has no text "
            "answers to judge (FID and CLIP score it)"
        )


def check_model_kinds(config: dict) -> None:
    """Pairs and the captioner name models that generate: captioners, or two image generators
    sharing a codebook."""
    for name, pair in config["pairs"].items():
        roles = [role for role in ("target", "draft") if role in pair]
        kinds = {role: model_kind(config, pair[role]) for role in roles}
        for role, kind in kinds.items():
            if kind in ("fid_features", "clip"):
                raise ConfigError(
                    f"config key pairs.{name}.{role}: {pair[role]!r} is a {kind!r} network "
                    "(for image metrics), not a model that generates"
                )
        generators = [r for r, k in kinds.items() if k == IMAGE_GENERATOR]
        if generators and len(generators) != len(kinds):
            raise ConfigError(
                f"config key pairs.{name}: an image generator pairs only with another (target "
                f"and draft share a vocabulary of image codes), got {kinds}"
            )
        # (codebooks known only once loaded are compared when a job loads them)
        books = [codebook(config, pair[r]) for r in generators]
        if len(books) == 2 and None not in books:
            for key in books[0]:
                if books[0][key] != books[1][key]:
                    raise ConfigError(
                        f"config key pairs.{name}: target and draft must share a VQ codebook, "
                        f"but their {key} differ ({books[0][key]} and {books[1][key]})"
                    )
    captioner = config.get("captioner")
    if captioner and model_kind(config, captioner["model"]) not in (None, "captioner"):
        raise ConfigError(
            f"config key captioner.model: {captioner['model']!r} is not a captioning model"
        )


def _codebook_rule(config: dict, cell) -> None:
    """A rule that relaxes over a VQ codebook (LANTERN) needs a target with one, and k within
    it: a target whose kind is known now is checked here, others when the generate job loads
    them."""
    rule = cell.spec.acceptance
    if not cell.spec.needs(CODEBOOK):
        return
    target = config["pairs"][cell.pair]["target"]
    kind = model_kind(config, target)
    where = f"config key methods.{cell.method}"
    if kind is not None and kind != IMAGE_GENERATOR:
        raise ConfigError(
            f"{where}: acceptance {rule!r} relaxes over the target's VQ codebook, but pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r} with none"
        )


def _target(config: dict, cell) -> None:
    """Each component's own checks of the pair's target (`Component.check_target`: Kangaroo's
    exit layer within its layers, LANTERN's k within its codebook), on what is known now."""
    target = config["pairs"][cell.pair]["target"]
    codes = (codebook(config, target) or {}).get("codes")
    facts = TargetFacts(target, layers=language_layers(config, target), codes=codes)
    try:
        cell.spec.check_target(facts)
    except ValueError as error:
        raise ConfigError(
            f"config key methods.{cell.method}: {error} (pair {cell.pair!r})"
        ) from None


def _visual_rule(config: dict, cell) -> None:
    """A rule guided by the prompt's visual tokens (LVSpec) needs prompts with some: not an
    image-generation cell, whose prompt is a caption and whose target writes image codes."""
    rule = cell.spec.acceptance
    if not cell.spec.needs(HIDDEN_STATES):
        return
    target = config["pairs"][cell.pair]["target"]
    if dataset_task(config, cell.dataset) == IMAGE_GENERATION or (
        model_kind(config, target) == IMAGE_GENERATOR
    ):
        raise ConfigError(
            f"config key methods.{cell.method}: acceptance {rule!r} compares drafted tokens with "
            f"the prompt's visual tokens, and the cells of dataset {cell.dataset!r} with pair "
            f"{cell.pair!r} (target {target!r}) generate images from text prompts, which have "
            "none; sweep it over datasets with images or video"
        )


def _head(config: dict, cell) -> None:
    """A head drafter trains on a dataset of the config of the cell's task: text answers over
    a language model's hidden states, or (EAGLE's head only, LANTERN's drafter) images over an
    image generator's."""
    kind = cell.spec.drafter
    if not cell.spec.needs(TRAINED_HEAD):
        return
    data = cell.spec.head_training().get("head_data")
    where = f"config key methods.{cell.method}"
    if data is None:
        raise ConfigError(
            f"{where}: method {cell.spec.method!r} drafts with a trained {kind} head; name "
            "the dataset (a training split) it trains on with `head_data`"
        )
    if data not in config["datasets"]:
        raise ConfigError(
            f"{where}: head_data {data!r} names no dataset (known: {sorted(config['datasets'])})"
        )
    target = config["pairs"][cell.pair]["target"]
    images = dataset_task(config, cell.dataset) == IMAGE_GENERATION
    image_heads = components.image_head_drafters()
    if images and kind not in image_heads:
        raise ConfigError(
            f"{where}: a {kind} head drafts text, and dataset {cell.dataset!r} (pair "
            f"{cell.pair!r}, target {target!r}) generates images; image generation drafts with "
            f"a draft generator or a head of kind {' or '.join(image_heads)}"
        )
    if dataset_task(config, data) != dataset_task(config, cell.dataset):
        task = "generates images" if images else "answers in text"
        raise ConfigError(
            f"{where}: head_data {data!r} must be a dataset of the cell's own task: the head "
            f"learns the target's behaviour there, and dataset {cell.dataset!r} {task}"
        )
    if not images and model_kind(config, target) == IMAGE_GENERATOR:
        raise ConfigError(
            f"{where}: a {kind} head reads the hidden states of a language model, and pair "
            f"{cell.pair!r}'s target {target!r} is an image generator"
        )


def dataset_task(config: dict, name: str) -> str:
    """What a dataset's samples ask for, by its source: an answer (`media.ANSWER`), or an image
    (`media.IMAGE_GENERATION`)."""
    entry = config["datasets"][name]
    return dataset_source.of(entry).task(name, entry)


def dataset_judge(config: dict, name: str) -> str | None:
    """The judge template a dataset's answers are graded by (its source's reading of `judge`),
    or None: not judged."""
    entry = config["datasets"][name]
    return dataset_source.of(entry).judge(name, entry)


def _task(config: dict, cell) -> None:
    """Image-generation datasets go to image generators, and image generators only get them."""
    target = config["pairs"][cell.pair]["target"]
    images = dataset_task(config, cell.dataset) == IMAGE_GENERATION
    kind = model_kind(config, target)
    if images and kind not in (None, IMAGE_GENERATOR):
        raise ConfigError(
            f"config key sweep: dataset {cell.dataset!r} asks for images, and pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r}, which writes text; pair it "
            "with image generators"
        )
    if not images and kind == IMAGE_GENERATOR:
        raise ConfigError(
            f"config key sweep: pair {cell.pair!r} generates images, and dataset "
            f"{cell.dataset!r} asks for text answers; sweep it over an image-generation dataset"
        )
    drafter = cell.spec.drafter
    if images and not cell.spec.is_ar and drafter not in components.image_drafters():
        raise ConfigError(
            f"config key methods.{cell.method}: drafter {drafter!r} drafts text only, and "
            f"dataset {cell.dataset!r} generates images; image generation drafts with one of "
            f"{list(components.image_drafters())}"
        )


def check_image_metrics(config: dict) -> None:
    """Image generation is scored by FID and CLIP score: their networks must be named, and be
    networks of the right kind, before any job runs."""
    images = {n for n in config["datasets"] if dataset_task(config, n) == IMAGE_GENERATION}
    swept = sorted({c.dataset for c in cells(config)} & images)
    metrics = config.get("image_metrics")
    if not swept:
        return
    if metrics is None:
        raise ConfigError(
            f"config key image_metrics: datasets {swept} generate images, scored by FID and "
            "CLIP score, and the config names no FID feature network or CLIP model "
            "(image_metrics: {fid_features: ..., clip: ...})"
        )
    for key in ("fid_features", "clip"):
        ref = checked_model_ref(config, f"image_metrics.{key}", metrics[key], f"the {key} network")
        metrics[key] = ref
        kind = model_kind(config, ref)
        if kind is not None and kind != key:
            raise ConfigError(
                f"config key image_metrics.{key}: {ref!r} is a {kind!r} model, not a {key!r} one"
            )


def check_cell(config: dict, cell) -> None:
    """A cell's rules and models: an image-generation rule's codebook, what its target must
    serve, its visual rule, its trained head, its dataset's task."""
    _codebook_rule(config, cell)
    _target(config, cell)
    _visual_rule(config, cell)
    _head(config, cell)
    _task(config, cell)
