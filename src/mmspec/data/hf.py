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
An answer column that holds a list (TextVQA's ten human answers; items may be texts or VQA v2's
{answer: ...} records) stays a list, the row's `references`, beside its JSON text in `reference`.

A video benchmark adds

    video: {column: video_name, frames: 16, dir: videos/Test_Videos, suffix: .mp4}

and each row's video becomes `frames` images sampled uniformly over it (after the images of
`image_columns`) and one video item of the message (`data.media`): a family with a video path of
its own reads them as one video, any other as that many images. The column may hold a
path (inside `dir` when given, `suffix` appended), the bytes of a video file, an HF Video value
({'bytes', 'path'}), or the frames themselves as a list of images; files and bytes are decoded
with PyAV (`pip install av`; `data/video.py`).

A multi-turn dataset (TABED's multi-turn scenarios, LLaVA-NeXT-Interleave-Bench, any LLaVA-style
`conversations` column) adds

    conversation: {column: conversations}   # role: from, content: value, user: human,
                                             # assistant: gpt, image_token: "<image>"

and each dataset row becomes one prepared row per user turn (turn 0, 1, ...): the earlier turns
with the dataset's own answers, then the turn's question; its answer is the reference. The row's
images (`image_columns`) go where the user turns mark `image_token`, in order; a conversation
with no marker gets them all at the start of its first question (the LLaVA convention).
`columns.question`/`answer` are then not needed (`columns.id` still names the id column).

An image-generation dataset (`task: image_generation`, e.g. COCO captions) gives each row a
text-only prompt, the formatted caption, and keeps its one image (`image_columns`) as the
reference image that generated images are scored against.

Nothing here reaches the network by itself: with HF_HUB_OFFLINE=1 a hub id loads from the local
cache or fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from mmspec.data import media
from mmspec.data.hf_spec import HFEntry, parse_entry
from mmspec.data.media import to_png
from mmspec.data.video import video_frames
from mmspec.hub import cache as hub_cache
from mmspec.hub.refs import is_local
from mmspec.storage.tables import PREPARED, write_table

PROGRESS_MIN_ROWS = 300  # show a progress bar when converting more rows than this
BATCH_SIZE = 64


def prepare_hf(name: str, spec: dict | HFEntry, out_path: str | Path) -> int:
    """Convert the dataset described by `spec` (a config entry, checked here, or its typed form)
    into `out_path` (PREPARED); return the row count.

    `name` is the dataset's name in the config: it becomes the scenario and the sample_id prefix.
    """
    spec = parse_entry(spec)
    dataset = load_split(spec)
    check_columns(dataset.column_names, spec)
    if spec.where:
        where = spec.where
        dataset = dataset.filter(lambda row: all(row[c] == v for c, v in where.items()))
        if len(dataset) == 0:
            raise ValueError(f"{spec.id}: no row matches `where` {where}")
    n_rows = len(dataset) if spec.limit is None else min(spec.limit, len(dataset))
    dataset = dataset.select(range(n_rows))
    progress = tqdm(
        total=n_rows, desc=f"prepare {name}", unit="row", disable=n_rows <= PROGRESS_MIN_ROWS
    )
    with progress:
        rows = []
        for index, row in enumerate(iter_rows(dataset)):
            if spec.conversation:
                rows.extend(convert_conversation(name, spec, index, row))
            else:
                rows.append(convert_row(name, spec, index, row))
            progress.update()
    check_unique_ids(spec.id, rows)
    write_table(pa.Table.from_pylist(rows, schema=PREPARED), out_path, PREPARED)
    return len(rows)


def load_split(spec: HFEntry):
    """Load the split named by `spec` as a `datasets.Dataset`.

    A directory written by `save_to_disk` goes through `load_from_disk`; anything else (a hub id,
    or a local directory of data files such as Parquet) through `load_dataset`.
    """
    import datasets  # imported here: slow to import, and only this stage needs it

    path = Path(spec.id).expanduser()
    if _saved_dataset(path) or _saved_dataset_dict(path):
        dataset = datasets.load_from_disk(str(path))
        return _pick_split(spec, dataset) if _saved_dataset_dict(path) else dataset
    try:
        source = spec.id
        if not is_local(source):  # a hub id: its needed files, fetched or downloaded now
            source = hub_cache.dataset_folder(spec.id, spec.config)
        return datasets.load_dataset(source, spec.config, split=spec.split)
    except Exception as err:
        err.add_note(
            f"mmspec: while loading hf dataset {spec.id!r} (config "
            f"{spec.config!r}, split {spec.split!r}); with HF_HUB_OFFLINE=1 a hub "
            "dataset must already be in the local Hugging Face cache (`mmspec fetch CONFIG`)"
        )
        raise


def _saved_dataset(path: Path) -> bool:
    """Whether `path` is a directory written by `Dataset.save_to_disk`."""
    return (path / "dataset_info.json").is_file() and (path / "state.json").is_file()


def _saved_dataset_dict(path: Path) -> bool:
    """Whether `path` is a directory written by `DatasetDict.save_to_disk`."""
    return (path / "dataset_dict.json").is_file()


def _pick_split(spec: HFEntry, dataset_dict):
    """Select `spec.split` from a DatasetDict, listing the splits it has when it lacks it."""
    if spec.split not in dataset_dict:
        raise ValueError(
            f"{spec.id}: no split {spec.split!r} (`split`); "
            f"available splits: {sorted(dataset_dict)}"
        )
    return dataset_dict[spec.split]


def check_columns(available: list[str], spec: HFEntry) -> None:
    """Fail clearly when `columns`, `image_columns` or the prompt name a column the data lacks."""
    named = [(f"columns.{field}", column) for field, column in spec.columns.items()]
    named += [("image_columns", column) for column in spec.image_columns]
    named += [("where", column) for column in spec.where]
    if spec.video:
        named.append(("video.column", spec.video.column))
    if spec.conversation:
        named.append(("conversation.column", spec.conversation.column))
        return _check_named(spec.id, available, named)  # the prompt template is unused
    named += [
        ("prompt", field)
        for field in prompt_fields(spec.id, spec.prompt)
        if field not in spec.columns
    ]  # our field names are aliases (see format_prompt)
    _check_named(spec.id, available, named)


def _check_named(source: str, available: list[str], named: list[tuple[str, str]]) -> None:
    for key, column in named:
        if column not in available:
            raise ValueError(
                f"{source}: `{key}` names column {column!r}, which the dataset "
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


def convert_row(name: str, spec: HFEntry, index: int, row: dict) -> dict:
    """Build the PREPARED row for dataset row number `index`."""
    columns = spec.columns
    row_id = row[columns["id"]] if "id" in columns else index
    where = f"{spec.id}: row {index} (id {row_id!r})"
    images = [
        png for column in spec.image_columns for png in row_images(where, column, row[column])
    ]
    if spec.task == media.IMAGE_GENERATION:
        return _image_generation_row(name, spec, row_id, where, images, row)
    content = [{"type": "image"} for _ in images]
    if spec.video:
        column = spec.video.column
        frames = video_frames(f"{where}, column {column!r}", spec.video, row[column])
        images += frames
        content.append(media.video_item(len(frames)))
    content.append({"type": "text", "text": format_prompt(where, spec, row)})
    return {
        "sample_id": f"{name}-{row_id}",
        "turn": 0,
        "scenario": name,
        "messages": json.dumps([{"role": "user", "content": content}], ensure_ascii=False),
        "images": images,
        "image_ids": [hashlib.sha1(png).hexdigest() for png in images],
        "reference": as_text(row[columns["answer"]]),
        "references": answer_list(f"{where}, column {columns['answer']!r}", row[columns["answer"]]),
        "qa": qa_pairs(f"{where}, column {columns['qa']!r}", row[columns["qa"]])
        if "qa" in columns
        else None,
    }


def qa_pairs(where: str, value: Any) -> str:
    """A row's questions with their correct answers (VDC's qa_list: a list of {question,
    answer}, or its JSON) as the PREPARED `qa` column: JSON [[question, answer], ...]."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e}); expected question/answer pairs") from None
    ok = (
        isinstance(value, list)
        and value
        and all(
            isinstance(q, dict) and isinstance(q.get("question"), str) and "answer" in q
            for q in value
        )
    )
    if not ok:
        raise ValueError(
            f"{where}: expected a non-empty list of {{question, answer}}, got {str(value)[:80]!r}"
        )
    return json.dumps([[q["question"], as_text(q["answer"])] for q in value], ensure_ascii=False)


def _image_generation_row(name, spec, row_id, where, images, row) -> dict:
    """A text-only prompt (the formatted caption) with one reference image (`media`)."""
    if len(images) != 1:
        raise ValueError(f"{where}: image generation needs one reference image, got {len(images)}")
    caption = format_prompt(where, spec, row)
    user = {"role": "user", "content": [{"type": "text", "text": caption}]}
    return {
        "sample_id": f"{name}-{row_id}",
        "turn": 0,
        "scenario": name,
        "messages": json.dumps([user], ensure_ascii=False),
        "images": images,
        "image_ids": [hashlib.sha1(png).hexdigest() for png in images],
        "reference": caption,
    }


def convert_conversation(name: str, spec: HFEntry, index: int, row: dict) -> list[dict]:
    """One PREPARED row per user turn of a multi-turn row (see the module docstring)."""
    conv, columns = spec.conversation, spec.columns
    row_id = row[columns["id"]] if "id" in columns else index
    where = f"{spec.id}: row {index} (id {row_id!r}), column {conv.column!r}"
    images = [
        png for column in spec.image_columns for png in row_images(where, column, row[column])
    ]
    turns = row[conv.column]
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"{where}: expected a non-empty list of turns, got {turns!r}")
    marked = sum(str(t.get(conv.content, "")).count(conv.image_token) for t in turns)
    if marked not in (0, len(images)):
        raise ValueError(
            f"{where}: the turns mark {marked} {conv.image_token} but the row has "
            f"{len(images)} images"
        )
    history, rows, question, used = [], [], None, 0
    for k, turn in enumerate(turns):
        role, text = turn.get(conv.role), turn.get(conv.content)
        if not isinstance(text, str):
            raise ValueError(f"{where}[{k}]: `{conv.content}` must hold the turn's text")
        if role == conv.user:
            if question is not None:
                raise ValueError(f"{where}[{k}]: two user turns in a row")
            lead = len(images) if (not marked and not history) else 0
            content, used = _interleave(text, conv.image_token, lead, used)
            question = {"role": "user", "content": content}
        elif role == conv.assistant:
            if question is None:
                raise ValueError(f"{where}[{k}]: an assistant turn answers no user turn")
            rows.append(
                {
                    "sample_id": f"{name}-{row_id}",
                    "turn": len(rows),
                    "scenario": name,
                    "messages": json.dumps([*history, question], ensure_ascii=False),
                    "images": images[:used],
                    "image_ids": [hashlib.sha1(png).hexdigest() for png in images[:used]],
                    "reference": text,
                }
            )
            answer = {"role": "assistant", "content": [{"type": "text", "text": text}]}
            history += [question, answer]
            question = None
        else:
            raise ValueError(
                f"{where}[{k}]: role {role!r}; expected {conv.user!r} or {conv.assistant!r} "
                f"in `{conv.role}`"
            )
    if not rows:
        raise ValueError(f"{where}: no user turn is answered")
    return rows


def _interleave(text: str, marker: str, lead: int, used: int) -> tuple[list[dict], int]:
    """A user turn's content items: `lead` images first, then text with an image item at each
    marker; returns them and the number of images used so far."""
    content = [{"type": "image"} for _ in range(lead)]
    used += lead
    pieces = text.split(marker)
    for j, piece in enumerate(pieces):
        if j:
            content.append({"type": "image"})
            used += 1
        if piece.strip():
            content.append({"type": "text", "text": piece.strip()})
    return content, used


def format_prompt(where: str, spec: HFEntry, row: dict) -> str:
    """Fill the prompt template from the row's columns.

    Our field names (`question`, `answer`, `id`) are also available, as aliases of the columns
    they map to, unless the dataset has a column of that name (the column wins).
    """
    aliases = {field: row[column] for field, column in spec.columns.items()}
    try:
        return spec.prompt.format(**{**aliases, **row})
    except (KeyError, IndexError, AttributeError, ValueError) as err:
        raise ValueError(f"{where}: cannot fill `prompt` {spec.prompt!r}: {err!r}") from err


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


def as_text(value: Any) -> str:
    """A reference answer as text: strings as they are, None as "", anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def answer_list(where: str, value: Any) -> list[str] | None:
    """A list-valued answer as the PREPARED `references`: its answers as texts (a {answer: ...}
    record, VQA v2's annotation format, gives its `answer`); None for a single answer."""
    if not isinstance(value, list | tuple):
        return None
    texts = []
    for k, item in enumerate(value):
        if isinstance(item, dict) and "answer" in item:
            item = item["answer"]
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ValueError(
                f"{where}[{k}]: {str(item)[:80]!r} is not an answer; expected a list of answer "
                "texts (or of {answer: ...} records)"
            )
        texts.append(str(item))
    return texts


def check_unique_ids(source: str, rows: list[dict]) -> None:
    """Fail when two rows share a (sample_id, turn) (the id column must identify rows)."""
    seen = set()
    for row in rows:
        key = (row["sample_id"], row["turn"])
        if key in seen:
            raise ValueError(
                f"{source}: duplicate sample_id {row['sample_id']!r}; "
                "`columns.id` must name a column with unique values"
            )
        seen.add(key)
