"""Config values as the schema reads them: strings that stand for the numbers, booleans or nulls
the schema expects (Snakemake's `--config` overrides) read as those types (`coerce`), the
sweep's schema with the entry schemas of the dataset sources it does not declare
(`sweep_schema`), and a schema error worded as the config key it names (`describe`)."""

from __future__ import annotations

import copy
import functools
import json
import re

import jsonschema

from mmspec import schema as config_schema
from mmspec.data import source as dataset_source
from mmspec.methods import registry

# --config KEY=VALUE: Snakemake reads a mapping or list VALUE with YAML's BaseLoader, which leaves
# every nested scalar a string ("generation={max_new_tokens: 16}" gives "16"). A string is read as
# the number, boolean or null the schema expects there only when it renders exactly that value.
_INTEGER_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")  # no leading zeros: YAML 1.1 reads 010 as 8

_NUMBER_RE = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")

_BOOLEANS = {
    spelling: value
    for word, value in (("true", True), ("false", False))
    for spelling in (word, word.title(), word.upper())
}

_NULLS = ("null", "Null", "NULL", "~", "")

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _scalar(text: str, kind: str):
    """(True, value) when `text` renders a value of JSON type `kind`, else (False, None)."""
    if kind == "null" and text in _NULLS:
        return True, None
    if kind == "boolean" and text in _BOOLEANS:
        return True, _BOOLEANS[text]
    if kind in ("integer", "number") and _INTEGER_RE.fullmatch(text):
        return True, int(text)
    if kind == "number" and _NUMBER_RE.fullmatch(text):
        return True, float(text)
    return False, None


def _expected_types(schema: dict) -> list[str]:
    """The JSON types a schema allows at its own level (from `type`, or from const/enum values)."""
    kinds = schema.get("type")
    if kinds is not None:
        return [kinds] if isinstance(kinds, str) else list(kinds)
    literals = [schema["const"]] if "const" in schema else list(schema.get("enum", []))
    return [_JSON_TYPES.get(type(v), "object") for v in literals]


def _coerce(value, schema, root: dict, validator):
    if not isinstance(schema, dict):
        return value  # boolean schemas say nothing about types
    if "$ref" in schema:
        value = _coerce(value, config_schema.resolve_ref(schema["$ref"], root), root, validator)
    for sub in schema.get("allOf", []):
        value = _coerce(value, sub, root, validator)
    for keyword in ("oneOf", "anyOf"):
        if keyword in schema:
            value = _coerce_branches(value, keyword, schema[keyword], root, validator)
    if isinstance(value, str):
        kinds = _expected_types(schema)
        if "string" in kinds:
            return value  # a genuine string (model id, path, dtype): left alone
        for kind in ("null", "boolean", "integer", "number"):
            if kind in kinds:
                ok, parsed = _scalar(value, kind)
                if ok:
                    return parsed
        return value
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        additional = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            subs = [properties[key]] if key in properties else []
            subs += [sub for pattern, sub in patterns.items() if re.search(pattern, str(key))]
            if not subs and isinstance(additional, dict):
                subs = [additional]  # JSON Schema: only keys no other keyword claims
            for sub in subs:
                item = _coerce(item, sub, root, validator)
            out[key] = item
        return out
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        items = schema.get("items")
        if isinstance(items, list):  # drafts before 2020-12: a list of schemas is prefixItems
            prefix, items = items, schema.get("additionalItems")
        return [
            _coerce(item, prefix[i] if i < len(prefix) else items, root, validator)
            for i, item in enumerate(value)
        ]
    return value


def _coerce_branches(value, keyword: str, branches: list, root: dict, validator):
    """`value` coerced for the first branch it then satisfies; unchanged if it already satisfies
    the oneOf/anyOf; otherwise coerced for the branch left with the fewest errors (so the error
    reported is the one that remains, not a string the branch would have read as a number)."""
    if not any(True for _ in validator.descend(value, {keyword: branches})):
        return value
    best, fewest = value, None
    for branch in branches:
        candidate = _coerce(value, branch, root, validator)
        errors = sum(1 for _ in validator.descend(candidate, branch))
        if errors == 0:
            return candidate
        if fewest is None or errors < fewest:
            best, fewest = candidate, errors
    return best


def coerce(value, schema: dict | None = None):
    """`value` with each string that `schema` (default: the config's, with method
    hyperparameter types) expects as an integer, number, boolean or null at its path converted
    when it exactly renders one ("16", "0.5", "true", "null", "~"); other values are unchanged.

    Makes `--config` overrides validate: Snakemake leaves the scalars of a mapping or list
    value strings. Returns a new structure; `value` is not modified.
    """
    schema = _coercion_schema(tuple(dataset_source.sources())) if schema is None else schema
    return _coerce(value, schema, schema, jsonschema.Draft202012Validator(schema))


def sweep_schema() -> dict:
    """config/schema.yaml, with one more form of a `datasets` entry for each dataset source it
    does not declare (a plugin's, whose class holds its entries' schema)."""
    root = config_schema.load()
    forms = root["properties"]["datasets"]["additionalProperties"]["oneOf"]
    declared = {form["properties"]["source"]["const"] for form in forms}
    extra = [s.entry_schema() for k, s in dataset_source.sources().items() if k not in declared]
    if not extra:
        return root
    schema = copy.deepcopy(root)
    schema["properties"]["datasets"]["additionalProperties"]["oneOf"] += extra
    return schema


@functools.cache
def _coercion_schema(dataset_sources: tuple[str, ...]) -> dict:
    """The config schema (given its dataset sources) plus the types it leaves to later checks:
    method hyperparameters (from the registry; a list is a grid) and the devices of a device
    map (a GPU index)."""
    schema = copy.deepcopy(sweep_schema())
    hyperparameters = {}
    for key, param in registry.known_params().items():
        kind = {int: "integer", bool: "boolean"}.get(param.type, "number")
        if param.type is not str and param.type is not list:
            one = {"type": kind}
            hyperparameters[key] = {"anyOf": [one, {"type": "array", "items": one}]}
    tree = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
    hyperparameters["paths"] = {"anyOf": [tree, {"type": "array", "items": tree}]}
    entry = schema["properties"]["methods"]["additionalProperties"]
    entry["properties"] = {**hyperparameters, **entry.get("properties", {})}
    pair = schema["properties"]["pairs"]["additionalProperties"]["properties"]
    pair["target_device_map"]["additionalProperties"] = {"type": "integer"}
    return schema


def key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def describe(error: jsonschema.ValidationError) -> str:
    """Turn a jsonschema error into 'config key <path>: <what was expected>'."""
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = key_path(error)
        keys = ", ".join(f"{where}.{k}" if where != "<top level>" else k for k in extra)
        guess = registry.close_matches(extra[0], allowed, n=2) if extra else ""
        # a dataset entry's keys are its source's (a plugin's entry_schema, for a plugin source)
        source = error.schema.get("properties", {}).get("source", {}).get("const")
        whose = f" (the keys dataset source {source!r} declares)" if source else ""
        hint = f"; allowed keys{whose}: {allowed}" if allowed else ""
        return f"config key {keys}: unknown key{guess}{hint}"
    if error.validator in ("minItems", "minProperties") and not error.instance:
        where = key_path(error)
        hint = EMPTY_HINTS.get(where, "give at least one entry or leave the key out")
        return f"config key {where}: empty ({json.dumps(error.instance)}); {hint}"
    if error.validator == "oneOf" and error.context:
        # Report the alternative that got furthest: of those whose `source` matches the entry's
        # (a dataset entry's form is picked by its source), the one with the fewest errors (a
        # toy dataset with one bad key, not the hf form it also fails), then its deepest error.
        branches: dict = {}
        for e in error.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)
        matching = [errs for errs in branches.values() if not _fails_source(errs)]
        if not matching and isinstance(error.instance, dict) and "source" in error.instance:
            return _unknown_source(error)
        closest = min(matching or branches.values(), key=len)
        # a misspelt key: its unknown key (naming the allowed ones) before the one it lacks
        deepest = max(
            closest,
            key=lambda e: (
                len(e.absolute_path),
                e.validator == "additionalProperties",
                -len(e.message),
            ),
        )
        return describe(deepest)
    if list(error.absolute_path) == ["judge", "api_key_env"]:
        # never echo the value: a key pasted here instead of its variable's name is a secret
        return (
            "config key judge.api_key_env: expected the NAME of the environment variable that "
            "holds the judge's API key (letters, digits, '_'), not the key itself"
        )
    return f"config key {key_path(error)}: {error.message}"


def _fails_source(errors: list) -> bool:
    """Whether a branch's errors include its `source` (another source's form)."""
    return any(list(e.relative_path)[:1] == ["source"] for e in errors)


def _unknown_source(error: jsonschema.ValidationError) -> str:
    """A dataset entry whose `source` no form (built in or installed) declares."""
    source = error.instance["source"]
    known = sorted(
        branch["properties"]["source"]["const"]
        for branch in error.schema["oneOf"]
        if "const" in branch.get("properties", {}).get("source", {})
    )
    guess = registry.close_matches(source, known, n=2)
    return (
        f"config key {key_path(error)}.source: unknown dataset source {source!r}{guess}; "
        f"known: {known} (a package adds dataset sources through the entry point group "
        f"{dataset_source.GROUP}: is the one that provides it installed?)"
    )


# what to do instead of an empty section, by its key
EMPTY_HINTS = {
    "sweep": "a sweep with no rules has no cells; leave `sweep` out to run every method on "
    "every dataset and pair",
    "methods": "a sweep with no methods has no cells; to run fewer methods, name them under a "
    "sweep rule's `methods`",
    "datasets": "a sweep with no datasets has no cells",
    "pairs": "a sweep with no model pairs has no cells",
    "seeds": "a sweep with no seeds has no cells; leave `seeds` out for [0]",
    "sweep_extra": "give the rows to add by name, e.g. `sweep_extra: {mine: {datasets: "
    "[toy_caption], pairs: [toy_vdraft], methods: [sd]}}`",
}
