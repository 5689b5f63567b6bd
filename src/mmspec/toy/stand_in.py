"""Stand-in datasets: small local copies of a config's Hugging Face datasets, built offline.

For rehearsing a cluster sweep on a laptop: each `source: hf` dataset of a config gets a
`save_to_disk` folder with the columns its spec reads (`columns`, `image_columns`, `where`, the
prompt's fields, `video`, `conversation`), filled from the toy world (its images, captions and
questions), and the config override that points the dataset's `id` at it. The sweep's own
prepare code then reads it exactly as it would read the real dataset.

The answer column holds the caption, or, for a dataset whose metric scores only a list of answers
(`vqa_accuracy`), ten human answers as TextVQA's rows do: AGREEMENT[k % 4] of row k's humans
give its answer (the first object's colour and shape) in spellings that VQA's normalisation folds
together, and the others something else, so row k's answer scores 1.0, 0.9, 0.6, 0.3.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mmspec.data import hf
from mmspec.data.hf_spec import HFEntry, parse_entry
from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import TEXT
from mmspec.toy import world as toyworld

HUMANS = 10  # answers per question, as in TextVQA and VQA v2
AGREEMENT = (10, 3, 2, 1)  # of row k's humans, AGREEMENT[k % 4] give its answer
AGREEING = ("{colour} {shape}", "{Colour} {shape}.", "a {colour} {shape}", "the {COLOUR} {SHAPE}")
OTHERS = ("{shape}", "{colour}", "unanswerable")


def _image(rng: np.random.Generator):
    import PIL.Image

    scene = toyworld.random_scene(rng)
    return PIL.Image.fromarray(toyworld.render(scene)), scene


def human_answers(scene, k: int) -> list[str]:
    """Row k's ten human answers about `scene` (the plain spelling of its answer first)."""
    colour, shape = scene[0].colour, scene[0].shape
    words = {"colour": colour, "shape": shape, "Colour": colour.capitalize()}
    words.update(COLOUR=colour.upper(), SHAPE=shape.upper())
    agree = AGREEMENT[k % len(AGREEMENT)]
    given = [AGREEING[i % len(AGREEING)].format(**words) for i in range(agree)]
    return given + [OTHERS[i % len(OTHERS)].format(**words) for i in range(HUMANS - agree)]


def _row(spec: HFEntry, k: int, rng: np.random.Generator) -> dict:
    columns = spec.columns
    row: dict = {}
    scene = None
    for column in spec.image_columns:
        row[column], scene = _image(rng)
    if spec.video:
        frames = [_image(rng)[0] for _ in range(spec.video.frames)]
        row[spec.video.column] = frames
    row.update({column: value for column, value in spec.where.items()})
    caption = toyworld.caption(scene) if scene else "a toy image ."
    if "question" in columns:
        row[columns["question"]] = toyworld.CAPTION_PROMPT
    if "answer" in columns:
        lists = TEXT not in metric_catalog.get(spec.metric).takes
        scene = scene or toyworld.random_scene(rng)
        row[columns["answer"]] = human_answers(scene, k) if lists else caption
    if "id" in columns:
        row[columns["id"]] = f"stand-in-{k}"
    if spec.conversation:
        conv = spec.conversation
        marker = conv.image_token if spec.image_columns else ""
        row[conv.column] = [
            {conv.role: conv.user, conv.content: f"{marker} {toyworld.CAPTION_PROMPT}"},
            {conv.role: conv.assistant, conv.content: caption},
            {conv.role: conv.user, conv.content: "what colour is it ?"},
            {conv.role: conv.assistant, conv.content: caption.split()[1]},
        ]
    else:
        for field in hf.prompt_fields(spec.id, spec.prompt):
            if field not in row and field not in columns:
                row[field] = f"({field})"
    return row


def write(name: str, spec: HFEntry, out: Path, rows: int = 4, seed: int = 0) -> Path:
    """A stand-in of HF dataset `name` (its typed entry `spec`) in folder `out`."""
    import datasets

    rng = np.random.default_rng([seed, len(name)])
    data = [_row(spec, k, rng) for k in range(rows)]
    features = {}
    for column in spec.image_columns:
        features[column] = datasets.Image()
    if spec.video:
        features[spec.video.column] = datasets.List(datasets.Image())
    table = {key: [r[key] for r in data] for key in data[0]}
    dataset = datasets.Dataset.from_dict(table)
    for column, feature in features.items():
        dataset = dataset.cast_column(column, feature)
    dataset.save_to_disk(str(out))
    return out


def write_all(config: dict, out: Path, rows: int = 4) -> dict:
    """Stand-ins of every HF dataset of a validated config, under `out`; returns the `--config`
    override that points the datasets at them (their `id`)."""
    override = {}
    for name, entry in config["datasets"].items():
        if entry["source"] != "hf":
            continue
        path = write(name, parse_entry(entry), Path(out) / name, rows)
        override[name] = {"id": str(path)}
    return {"datasets": override}


def as_cli(override: dict) -> str:
    """The override as one `--config` argument (YAML flow mapping, which is JSON)."""
    return "datasets=" + json.dumps(override["datasets"])
