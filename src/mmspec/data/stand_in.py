"""Stand-in datasets: small local copies of a config's Hugging Face datasets, built offline.

For rehearsing a cluster sweep on a laptop: each `source: hf` dataset of a config gets a
`save_to_disk` folder with the columns its spec reads (`columns`, `image_columns`, `where`, the
prompt's fields, `video`, `conversation`), filled from the toy world (its images, captions and
questions), and the config override that points the dataset's `id` at it. The sweep's own
prepare code then reads it exactly as it would read the real dataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mmspec.data import hf
from mmspec.toy import world as toyworld


def _image(rng: np.random.Generator):
    import PIL.Image

    scene = toyworld.random_scene(rng)
    return PIL.Image.fromarray(toyworld.render(scene)), toyworld.caption(scene)


def _row(spec: dict, k: int, rng: np.random.Generator) -> dict:
    columns = spec["columns"]
    row: dict = {}
    caption = "a toy image ."
    for column in spec["image_columns"]:
        row[column], caption = _image(rng)
    if spec.get("video"):
        frames = [_image(rng)[0] for _ in range(spec["video"]["frames"])]
        row[spec["video"]["column"]] = frames
    row.update({column: value for column, value in spec.get("where", {}).items()})
    if "question" in columns:
        row[columns["question"]] = toyworld.CAPTION_PROMPT
    if "answer" in columns:
        row[columns["answer"]] = caption
    if "id" in columns:
        row[columns["id"]] = f"stand-in-{k}"
    if spec.get("conversation"):
        conv = spec["conversation"]
        marker = conv["image_token"] if spec["image_columns"] else ""
        row[conv["column"]] = [
            {conv["role"]: conv["user"], conv["content"]: f"{marker} {toyworld.CAPTION_PROMPT}"},
            {conv["role"]: conv["assistant"], conv["content"]: caption},
            {conv["role"]: conv["user"], conv["content"]: "what colour is it ?"},
            {conv["role"]: conv["assistant"], conv["content"]: caption.split()[1]},
        ]
    else:
        for field in hf.prompt_fields(spec["id"], spec["prompt"]):
            if field not in row and field not in columns:
                row[field] = f"({field})"
    return row


def write(name: str, spec: dict, out: Path, rows: int = 4, seed: int = 0) -> Path:
    """A stand-in of HF dataset `name` (its checked `spec`) in folder `out`."""
    import datasets

    rng = np.random.default_rng([seed, len(name)])
    data = [_row(spec, k, rng) for k in range(rows)]
    features = {}
    for column in spec["image_columns"]:
        features[column] = datasets.Image()
    if spec.get("video"):
        features[spec["video"]["column"]] = datasets.List(datasets.Image())
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
    for name, spec in config["datasets"].items():
        if spec["source"] != "hf":
            continue
        checked = hf.check_spec(spec)
        path = write(name, checked, Path(out) / name, rows)
        override[name] = {"id": str(path)}
    return {"datasets": override}


def as_cli(override: dict) -> str:
    """The override as one `--config` argument (YAML flow mapping, which is JSON)."""
    return "datasets=" + json.dumps(override["datasets"])
