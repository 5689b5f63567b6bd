"""A `source: hf` dataset entry checked as config/schema.yaml declares it, with the rules between
keys the schema does not state (which columns are required, what image generation takes), and
parsed into its typed form (`HFEntry`), which preparing reads.

Light on purpose: config validation checks every `source: hf` entry before any job (a required
column left out is named then, not when the prepare job runs), and validation imports neither
pyarrow nor `datasets`; `data.hf` prepares what passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmspec import schema
from mmspec.data import media

# A `source: hf` entry as config/schema.yaml declares it: check_spec checks a spec against it and
# takes its defaults there (`metric` is for scoring, unused here), so a spec given here directly,
# not through a validated config, is checked and completed as the config's would be.
SPEC_SCHEMA = schema.section("datasets", "hf")
REQUIRED_COLUMN_FIELDS = ("question", "answer")
# what a key the schema gives no default reads as when left out
UNSET = {"config": None, "limit": None, "where": {}, "video": None, "conversation": None}
UNSET_VIDEO = {"dir": None}


@dataclass(frozen=True)
class VideoColumn:
    """`video:`: the column holding each row's video, and how its frames are read."""

    column: str
    frames: int  # sampled uniformly over the video
    dir: str | None  # the folder a path in the column is inside
    suffix: str  # appended to a path in the column


@dataclass(frozen=True)
class Conversation:
    """`conversation:`: the column holding each row's turns, and how a turn is written."""

    column: str
    role: str  # a turn's key naming who speaks
    content: str  # a turn's key holding its text
    user: str  # the role's value of a user turn
    assistant: str  # ... of an assistant turn
    image_token: str  # where a user turn places the row's next image


@dataclass(frozen=True)
class HFEntry:
    """A checked `source: hf` entry, its defaults filled in (config/schema.yaml says what each
    key means)."""

    id: str  # a hub id or a local folder
    split: str
    columns: dict[str, str]  # our field (question, answer, id, qa) -> the dataset's column
    config: str | None = None
    prompt: str = "{question}"
    image_columns: tuple[str, ...] = ()
    limit: int | None = None
    where: dict = field(default_factory=dict)  # column -> the value a row must hold
    video: VideoColumn | None = None
    conversation: Conversation | None = None
    task: str = media.ANSWER
    metric: str = "exact_match"


def parse_entry(spec: dict | HFEntry) -> HFEntry:
    """`spec` checked (`check_spec`) and typed; an HFEntry as it is."""
    if isinstance(spec, HFEntry):
        return spec
    checked = check_spec(spec)
    video, conversation = checked["video"], checked["conversation"]
    return HFEntry(
        id=checked["id"],
        split=checked["split"],
        columns=dict(checked["columns"]),
        config=checked["config"],
        prompt=checked["prompt"],
        image_columns=tuple(checked["image_columns"]),
        limit=checked["limit"],
        where=dict(checked["where"]),
        video=None if video is None else VideoColumn(**video),
        conversation=None if conversation is None else Conversation(**conversation),
        task=checked["task"],
        metric=checked["metric"],
    )


def check_spec(spec: dict) -> dict:
    """A `source: hf` spec checked against config/schema.yaml (its keys, types and ranges, named
    as the schema's errors name them) and completed with the schema's defaults, then against the
    rules between keys that the schema does not state. A key left out that has no default reads
    as None (`config`, `limit`, `video`, `conversation`) or {} (`where`)."""
    if not isinstance(spec, dict):
        raise ValueError(f"hf dataset spec must be a mapping, got {type(spec).__name__}")
    spec = {"source": "hf", **spec}
    if isinstance(spec.get("image_columns"), str):  # one column, written as its name
        spec["image_columns"] = [spec["image_columns"]]
    source = spec["id"] if isinstance(spec.get("id"), str) else "hf dataset spec"
    spec = {**UNSET, **schema.complete(spec, SPEC_SCHEMA, source)}
    if spec["video"] is not None:
        spec["video"] = {**UNSET_VIDEO, **spec["video"]}
    images = spec["task"] == media.IMAGE_GENERATION
    if images and (spec["conversation"] or spec["video"]):
        raise ValueError(f"{source}: image generation takes no `conversation` or `video`")
    required = () if spec["conversation"] else REQUIRED_COLUMN_FIELDS
    if images:
        required = ("question",)  # the caption; the reference is the row's image
    for key in required:
        if key not in spec["columns"]:
            raise ValueError(f"{source}: `columns.{key}` is required")
    if images and len(spec["image_columns"]) != 1:
        raise ValueError(
            f"{source}: image generation needs exactly one of `image_columns` (the reference "
            f"image), got {spec['image_columns']}"
        )
    empty = [k for k, v in (spec["conversation"] or {}).items() if not v]
    if empty:
        raise ValueError(f"{source}: `conversation.{empty[0]}` must be a non-empty string")
    return spec
