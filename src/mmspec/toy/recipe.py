"""A toy model's recipe (config `toy.models.<name>`), completed with the defaults
config/schema.yaml declares for its kind: the trainers read every key of their kind directly, so
a recipe written by hand (a test's, an analysis's) trains as the same recipe in a config would."""

from __future__ import annotations

from mmspec import schema

CAPTIONER = "captioner"  # the kind of a recipe that names none
# The codebook of an image generator is fitted from these: a pair's two must agree on them.
CODEBOOK_KEYS = ("codes", "patch", "vq_images")


def complete(spec: dict, name: str = "recipe") -> dict:
    """`spec` checked against the schema's toy model recipe and completed with its kind's
    defaults (a copy); a bad key is a ConfigError naming toy.models.<name> and the key."""
    node = schema.section("toy", "models")["additionalProperties"]
    return schema.complete(spec, node, f"toy.models.{name}")


def kind(spec: dict) -> str:
    """What a recipe trains (config/schema.yaml: toy.models.*.kind)."""
    return spec.get("kind", CAPTIONER)


def _kind_keys() -> dict[str, set[str]]:
    """Every key one kind of recipe alone reads (config/schema.yaml: the `then` of its kind's
    part of a recipe's `allOf`); the other keys are common to all kinds."""
    node = schema.section("toy", "models")["additionalProperties"]
    keys = {}
    for part in node["allOf"]:
        keys[part["if"]["properties"]["kind"]["const"]] = set(part["then"]["properties"])
    return keys


KIND_KEYS = _kind_keys()
