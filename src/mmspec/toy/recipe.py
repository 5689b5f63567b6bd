"""A toy model's recipe (config `toy.models.<name>`), completed with the defaults
config/schema.yaml declares for its kind: the trainers read every key of their kind directly, so
a recipe written by hand (a test's, an analysis's) trains as the same recipe in a config would."""

from __future__ import annotations

from mmspec import schema


def complete(spec: dict, name: str = "recipe") -> dict:
    """`spec` checked against the schema's toy model recipe and completed with its kind's
    defaults (a copy); a bad key is a ConfigError naming toy.models.<name> and the key."""
    node = schema.section("toy", "models")["additionalProperties"]
    return schema.complete(spec, node, f"toy.models.{name}")
