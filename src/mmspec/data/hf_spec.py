"""A `source: hf` dataset entry checked as config/schema.yaml declares it, with the rules between
keys the schema does not state (which columns are required, what image generation takes).

Light on purpose: config validation checks every `source: hf` entry before any job (a required
column left out is named then, not when the prepare job runs), and validation imports neither
pyarrow nor `datasets`; `data.hf` prepares what passes.
"""

from __future__ import annotations

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
    for field in required:
        if field not in spec["columns"]:
            raise ValueError(f"{source}: `columns.{field}` is required")
    if images and len(spec["image_columns"]) != 1:
        raise ValueError(
            f"{source}: image generation needs exactly one of `image_columns` (the reference "
            f"image), got {spec['image_columns']}"
        )
    empty = [k for k, v in (spec["conversation"] or {}).items() if not v]
    if empty:
        raise ValueError(f"{source}: `conversation.{empty[0]}` must be a non-empty string")
    return spec
