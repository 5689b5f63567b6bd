"""Prepare a Hugging Face dataset (hub id or local directory) as a PREPARED table.

A config entry such as

    source: hf
    id: lmms-lab/llava-bench-in-the-wild   # hub id, or a local directory
    config: null                          # optional dataset config name
    split: train
    columns: {question: question, answer: gpt_answer, id: question_id}
    prompt: "{question}"
    image_columns: [image]                # default []: text-only prompts
    limit: 100

becomes one single-turn row per dataset row: the user message holds one image placeholder per
image (in column order, list-valued columns expanded in place) followed by the formatted prompt.
Nothing here reaches the network by itself: with HF_HUB_OFFLINE=1 a hub id loads from the local
cache or fails.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import PIL.Image
import pyarrow as pa
from tqdm import tqdm

from mmspec.tables import PREPARED, write_table

# the keys of a `source: hf` entry in config/schema.yaml; `metric` is for scoring, unused here
SPEC_KEYS = {
    "source",
    "id",
    "config",
    "split",
    "columns",
    "prompt",
    "image_columns",
    "limit",
    "metric",
    "group",
    "where",
}
COLUMN_FIELDS = {"question", "answer", "id"}
REQUIRED_COLUMN_FIELDS = ("question", "answer")
DEFAULTS = {
    "config": None,
    "split": "train",
    "prompt": "{question}",
    "image_columns": [],
    "limit": None,
    "where": {},
}
PROGRESS_MIN_ROWS = 300  # show a progress bar when converting more rows than this
BATCH_SIZE = 64


def prepare_hf(name: str, spec: dict, out_path: str | Path) -> int:
    """Convert the dataset described by `spec` into `out_path` (PREPARED); return the row count.

    `name` is the dataset's name in the config: it becomes the scenario and the sample_id prefix.
    """
    spec = check_spec(spec)
    dataset = load_split(spec)
    check_columns(dataset.column_names, spec)
    if spec["where"]:
        where = spec["where"]
        dataset = dataset.filter(lambda row: all(row[c] == v for c, v in where.items()))
        if len(dataset) == 0:
            raise ValueError(f"{spec['id']}: no row matches `where` {where}")
    n_rows = len(dataset) if spec["limit"] is None else min(spec["limit"], len(dataset))
    dataset = dataset.select(range(n_rows))
    progress = tqdm(
        total=n_rows, desc=f"prepare {name}", unit="row", disable=n_rows <= PROGRESS_MIN_ROWS
    )
    with progress:
        rows = []
        for index, row in enumerate(iter_rows(dataset)):
            rows.append(convert_row(name, spec, index, row))
            progress.update()
    check_unique_ids(spec["id"], rows)
    write_table(pa.Table.from_pylist(rows, schema=PREPARED), out_path, PREPARED)
    return len(rows)


def check_spec(spec: dict) -> dict:
    """Validate a `source: hf` spec and return it with defaults filled in."""
    if not isinstance(spec, dict):
        raise ValueError(f"hf dataset spec must be a mapping, got {type(spec).__name__}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"hf dataset spec: unknown key(s) {unknown}; allowed: {sorted(SPEC_KEYS)}")
    spec = {**DEFAULTS, **spec}
    if spec.get("source", "hf") != "hf":
        raise ValueError(f"hf dataset spec: source must be 'hf', got {spec['source']!r}")
    if not isinstance(spec.get("id"), str) or not spec["id"]:
        raise ValueError("hf dataset spec: `id` (a hub id or local directory) is required")
    for key in ("config", "split", "prompt"):
        if not (isinstance(spec[key], str) or (key == "config" and spec[key] is None)):
            raise ValueError(f"{spec['id']}: `{key}` must be a string, got {spec[key]!r}")
    spec["columns"] = _check_column_map(spec["id"], spec.get("columns"))
    spec["image_columns"] = _check_image_columns(spec["id"], spec["image_columns"])
    if not isinstance(spec["where"], dict):
        raise ValueError(f"{spec['id']}: `where` must map column names to values")
    limit = spec["limit"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{spec['id']}: `limit` must be a positive integer or null, got {limit!r}")
    return spec


def _check_column_map(source: str, columns: Any) -> dict[str, str]:
    """Check `columns`: our field -> dataset column, with `question` and `answer` required."""
    if not isinstance(columns, dict):
        raise ValueError(f"{source}: `columns` must map question/answer[/id] to dataset columns")
    unknown = sorted(set(columns) - COLUMN_FIELDS)
    if unknown:
        raise ValueError(
            f"{source}: unknown key(s) {unknown} in `columns`; allowed: {sorted(COLUMN_FIELDS)}"
        )
    for field in REQUIRED_COLUMN_FIELDS:
        if field not in columns:
            raise ValueError(f"{source}: `columns.{field}` is required")
    for field, column in columns.items():
        if not isinstance(column, str):
            raise ValueError(f"{source}: `columns.{field}` must be a column name, got {column!r}")
    return dict(columns)


def _check_image_columns(source: str, image_columns: Any) -> list[str]:
    """Check `image_columns`: a column name or a list of them (possibly empty)."""
    if isinstance(image_columns, str):
        image_columns = [image_columns]
    if not isinstance(image_columns, list) or not all(isinstance(c, str) for c in image_columns):
        raise ValueError(
            f"{source}: `image_columns` must be a list of column names, got {image_columns!r}"
        )
    return image_columns


def load_split(spec: dict):
    """Load the split named by `spec` as a `datasets.Dataset`.

    A directory written by `save_to_disk` goes through `load_from_disk`; anything else (a hub id,
    or a local directory of data files such as Parquet) through `load_dataset`.
    """
    import datasets  # imported here: slow to import, and only this stage needs it

    path = Path(spec["id"]).expanduser()
    if _saved_dataset(path) or _saved_dataset_dict(path):
        dataset = datasets.load_from_disk(str(path))
        return _pick_split(spec, dataset) if _saved_dataset_dict(path) else dataset
    try:
        return datasets.load_dataset(spec["id"], spec["config"], split=spec["split"])
    except Exception as err:
        err.add_note(
            f"mmspec: while loading hf dataset {spec['id']!r} (config "
            f"{spec['config']!r}, split {spec['split']!r}); with HF_HUB_OFFLINE=1 a hub "
            "dataset must already be in the local Hugging Face cache"
        )
        raise


def _saved_dataset(path: Path) -> bool:
    """Whether `path` is a directory written by `Dataset.save_to_disk`."""
    return (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _saved_dataset_dict(path: Path) -> bool:
    """Whether `path` is a directory written by `DatasetDict.save_to_disk`."""
    return (path / "dataset_dict.json").is_file()


def _pick_split(spec: dict, dataset_dict):
    """Select `spec['split']` from a DatasetDict, listing the splits it has when it lacks it."""
    if spec["split"] not in dataset_dict:
        raise ValueError(
            f"{spec['id']}: no split {spec['split']!r} (`split`); "
            f"available splits: {sorted(dataset_dict)}"
        )
    return dataset_dict[spec["split"]]


def check_columns(available: list[str], spec: dict) -> None:
    """Fail clearly when `columns`, `image_columns` or the prompt name a column the data lacks."""
    named = [(f"columns.{field}", column) for field, column in spec["columns"].items()]
    named += [("image_columns", column) for column in spec["image_columns"]]
    named += [("where", column) for column in spec.get("where", {})]
    named += [
        ("prompt", field)
        for field in prompt_fields(spec["id"], spec["prompt"])
        if field not in spec["columns"]
    ]  # our field names are aliases (see format_prompt)
    for key, column in named:
        if column not in available:
            raise ValueError(
                f"{spec['id']}: `{key}` names column {column!r}, which the dataset "
                f"lacks; available columns: {sorted(available)}"
            )


def prompt_fields(source: str, prompt: str) -> list[str]:
    """The column names a `str.format` template refers to (`{a}`, `{a[0]}`, `{a.b}` -> `a`)."""
    fields = []
    for _, field, _, _ in string.Formatter().parse(prompt):
        if field is None:
            continue
        base = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not base or base.isdigit():
            raise ValueError(
                f"{source}: `prompt` {prompt!r} uses a positional field; "
                "name a column instead, e.g. {question}"
            )
        fields.append(base)
    return fields


def iter_rows(dataset) -> Iterator[dict]:
    """Yield the rows as plain Python dicts, images left undecoded ({'bytes', 'path'} dicts)."""
    for batch in dataset.with_format("arrow").iter(batch_size=BATCH_SIZE):
        yield from batch.to_pylist()


def convert_row(name: str, spec: dict, index: int, row: dict) -> dict:
    """Build the PREPARED row for dataset row number `index`."""
    columns = spec["columns"]
    row_id = row[columns["id"]] if "id" in columns else index
    where = f"{spec['id']}: row {index} (id {row_id!r})"
    images = [
        png for column in spec["image_columns"] for png in row_images(where, column, row[column])
    ]
    content = [{"type": "image"} for _ in images]
    content.append({"type": "text", "text": format_prompt(where, spec, row)})
    return {
        "sample_id": f"{name}-{row_id}",
        "turn": 0,
        "scenario": name,
        "messages": json.dumps([{"role": "user", "content": content}], ensure_ascii=False),
        "images": images,
        "image_ids": [hashlib.sha1(png).hexdigest() for png in images],
        "reference": as_text(row[columns["answer"]]),
    }


def format_prompt(where: str, spec: dict, row: dict) -> str:
    """Fill the prompt template from the row's columns.

    Our field names (`question`, `answer`, `id`) are also available, as aliases of the columns
    they map to, unless the dataset has a column of that name (the column wins).
    """
    aliases = {field: row[column] for field, column in spec["columns"].items()}
    try:
        return spec["prompt"].format(**{**aliases, **row})
    except (KeyError, IndexError, AttributeError, ValueError) as err:
        raise ValueError(f"{where}: cannot fill `prompt` {spec['prompt']!r}: {err!r}") from err


def row_images(where: str, column: str, value: Any) -> list[bytes]:
    """PNG bytes of the image(s) in one cell: an image, a list of images, or None (no image)."""
    is_list = isinstance(value, list | tuple)
    pngs = []
    for position, item in enumerate(value if is_list else [value]):
        if item is None:
            continue
        try:
            pngs.append(to_png(item))
        except Exception as err:
            at = f"column {column!r}" + (f"[{position}]" if is_list else "")
            raise ValueError(f"{where}, {at}: cannot decode image: {err}") from err
    return pngs


def to_png(value: Any) -> bytes:
    """Decode one image value (PIL image, {'bytes', 'path'} dict, raw bytes or path) to RGB PNG."""
    if isinstance(value, bytes | bytearray):
        value = {"bytes": bytes(value), "path": None}
    if not isinstance(value, PIL.Image.Image):
        if not isinstance(value, dict | str):
            raise TypeError(f"not an image value: {type(value).__name__}")
        import datasets

        value = datasets.Image().decode_example(value)  # also applies the EXIF orientation
    buffer = io.BytesIO()
    value.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def as_text(value: Any) -> str:
    """A reference answer as text: strings as they are, None as "", anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def check_unique_ids(source: str, rows: list[dict]) -> None:
    """Fail when two rows share a sample_id (the id column must identify rows)."""
    seen = set()
    for row in rows:
        if row["sample_id"] in seen:
            raise ValueError(
                f"{source}: duplicate sample_id {row['sample_id']!r}; "
                "`columns.id` must name a column with unique values"
            )
        seen.add(row["sample_id"])
