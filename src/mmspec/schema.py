"""config/schema.yaml: the sweep configuration's schema, read once, and the defaults it declares.

The schema is the one place a key's type, range and default are written: validation reads it
(mmspec.sweep.config), so do the defaults (`fill_defaults`) and the parts of mmspec that check a
piece of configuration on its own (`section`, e.g. a Hugging Face dataset's spec in data/hf.py).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

PATH = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"


class ConfigError(ValueError):
    """A configuration problem, with the key path that caused it."""


@functools.lru_cache(maxsize=1)
def load() -> dict:
    """config/schema.yaml (read once; callers must not change it)."""
    with open(PATH) as f:
        return yaml.safe_load(f)


def resolve_ref(ref: str, root: dict) -> dict:
    """The subschema a local `$ref` ("#/$defs/x") points to; {} (no coercion) for others."""
    if not ref.startswith("#"):
        return {}
    node = root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node.get(part, {})
    return node if isinstance(node, dict) else {}


def fill_defaults(instance, validator, schema=None) -> None:
    """Set, in place, each key a schema declares with a `default` that `instance` lacks, at every
    depth: object properties (and of each entry of an `additionalProperties` mapping), array
    items, the `oneOf` / `anyOf` branch that `instance` matches, and `allOf` parts (an
    `if`/`then` part only when `instance` matches its `if`). `instance` must be valid already;
    `schema` is the validator's own unless given (a part of it)."""
    schema = validator.schema if schema is None else schema
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        fill_defaults(instance, validator, resolve_ref(schema["$ref"], validator.schema))
    for part in schema.get("allOf", []):
        fill_defaults(instance, validator, part)
    for keyword in ("oneOf", "anyOf"):
        for branch in schema.get(keyword, []):
            if validator.evolve(schema=branch).is_valid(instance):
                fill_defaults(instance, validator, branch)
                break
    if "if" in schema:
        matched = validator.evolve(schema=schema["if"]).is_valid(instance)
        fill_defaults(instance, validator, schema.get("then" if matched else "else", {}))
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in instance and isinstance(sub, dict) and "default" in sub:
                instance[name] = copy.deepcopy(sub["default"])
            if name in instance:
                fill_defaults(instance[name], validator, sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, value in instance.items():
                if name not in properties:
                    fill_defaults(value, validator, extra)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for item in instance:
            fill_defaults(item, validator, schema["items"])


def complete(instance: dict, node: dict, where: str) -> dict:
    """A copy of `instance` with the defaults the subschema `node` declares (its `allOf` and
    `if`/`then` parts included), after checking it against `node`: a ConfigError names `where`,
    the key and what was expected."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(load())
    error = jsonschema.exceptions.best_match(validator.evolve(schema=node).iter_errors(instance))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path)
        raise ConfigError(
            f"{where}: `{key}`: {error.message}" if key else f"{where}: {error.message}"
        )
    out = copy.deepcopy(instance)
    fill_defaults(out, validator, node)
    return out


def section(*path: str) -> dict:
    """The subschema at `path` under the schema's properties (a `oneOf` step is the branch whose
    `source` is that constant, e.g. section("datasets", "hf"))."""
    node = load()
    for key in path:
        if "properties" in node and key in node["properties"]:
            node = node["properties"][key]
        elif "additionalProperties" in node and isinstance(node["additionalProperties"], dict):
            node = node["additionalProperties"]
            node = _branch(node, key) if "oneOf" in node else node["properties"][key]
        else:
            raise KeyError(f"config/schema.yaml has no section {'.'.join(path)}")
    return node


def _branch(node: dict, source: str) -> dict:
    for branch in node["oneOf"]:
        if branch.get("properties", {}).get("source", {}).get("const") == source:
            return branch
    raise KeyError(f"config/schema.yaml: no branch with source {source!r}")


def defaults(node: dict) -> dict:
    """The defaults a subschema declares for its own properties (a copy)."""
    return {
        key: copy.deepcopy(sub["default"])
        for key, sub in node.get("properties", {}).items()
        if isinstance(sub, dict) and "default" in sub
    }
