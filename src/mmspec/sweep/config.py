"""The sweep configuration: validation against config/schema.yaml (and the entry schemas of
the dataset sources it does not declare), defaults, and the checks across sections that run
before any job (each dataset and model by its source; cells by `cells`)."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from pathlib import Path

import jsonschema
import yaml

from mmspec import schema as config_schema
from mmspec.data import source as dataset_source
from mmspec.data.media import IMAGE_GENERATION
from mmspec.decoding.component import (
    CAPTIONS,
    CODEBOOK,
    DRAFT_MODEL,
    HIDDEN_STATES,
    TRAINED_HEAD,
    TargetFacts,
)
from mmspec.methods import components, registry
from mmspec.methods.components import SELF_DRAFT
from mmspec.models import source as model_source
from mmspec.models.source import IMAGE_GENERATOR
from mmspec.schema import ConfigError
from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import TEXT
from mmspec.sweep import search_runs, search_space
from mmspec.sweep.cells import cells, check_ar_cells, check_distinct, method_points
from mmspec.sweep.model_refs import (
    check_device_map,
    check_model_files,
    checked_model_ref,
    codebook,
    language_layers,
    model_kind,
)
from mmspec.sweep.search_space import is_searched

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


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


_EMPTY_HINTS = {
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


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    """Turn a jsonschema error into 'config key <path>: <what was expected>'."""
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = _key_path(error)
        keys = ", ".join(f"{where}.{k}" if where != "<top level>" else k for k in extra)
        hint = f"; allowed keys: {allowed}" if allowed else ""
        return f"config key {keys}: unknown key{hint}"
    if error.validator in ("minItems", "minProperties") and not error.instance:
        where = _key_path(error)
        hint = _EMPTY_HINTS.get(where, "give at least one entry or leave the key out")
        return f"config key {where}: empty ({json.dumps(error.instance)}); {hint}"
    if error.validator == "oneOf" and error.context:
        # Report the alternative that got furthest: the one with the fewest errors (a toy
        # dataset with one bad key, not the hf form it also fails), then its deepest error.
        branches: dict = {}
        for e in error.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)
        closest = min(branches.values(), key=len)
        deepest = max(closest, key=lambda e: (len(e.absolute_path), -len(e.message)))
        return _describe(deepest)
    if list(error.absolute_path) == ["judge", "api_key_env"]:
        # never echo the value: a key pasted here instead of its variable's name is a secret
        return (
            "config key judge.api_key_env: expected the NAME of the environment variable that "
            "holds the judge's API key (letters, digits, '_'), not the key itself"
        )
    return f"config key {_key_path(error)}: {error.message}"


def check_overrides(overrides: dict | None) -> None:
    """Overrides merge into the config's mappings, so an empty mapping of a section
    (`--config 'methods={}'`, or `methods: {}` in a partial --configfile) would merge nothing and
    be silently ignored: an error, naming the key."""
    for key in EMPTY_OVERRIDE_SECTIONS:
        if isinstance(overrides, dict) and overrides.get(key) == {}:
            raise ConfigError(
                f"config key {key}: an empty mapping given as an override merges nothing into "
                f"the config's {key} (it would be ignored); {_EMPTY_HINTS[key]}"
            )


EMPTY_OVERRIDE_SECTIONS = ("methods", "datasets", "pairs", "sweep_extra")


def validate(config: dict, overrides: dict | None = None) -> dict:
    """Validate `config` (schema, then names and method hyperparameters); return it with defaults.

    Strings that stand for the numbers, booleans or nulls the schema expects (`--config`
    overrides) are converted first. `overrides` are what was merged into `config` (Snakemake's
    --config / --configfile values; the workflow passes them): an empty section among them is
    an error. Raises ConfigError naming the first offending key path.
    """
    check_overrides(overrides)
    extra = config.get("sweep_extra")
    if isinstance(extra, dict) and any(row is not None for row in extra.values()):
        if "sweep" not in config:
            raise ConfigError(
                "config key sweep_extra: this sweep has no `sweep` rows, so every method already "
                "runs on every dataset and pair (the extra rows add nothing, and every method "
                "also runs on the extra rows' datasets); give `sweep` rows, or name these rows "
                "under `sweep`"
            )
    config = coerce(config)
    validator = jsonschema.Draft202012Validator(sweep_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(_describe(errors[0]))
    config = _with_defaults(config)
    for section in ("datasets", "pairs", "methods"):
        for name in config[section]:
            if not NAME_RE.match(name):
                raise ConfigError(
                    f"config key {section}.{name}: names may hold letters, digits, '_', '.', '-'"
                )
    for name, entry in config["methods"].items():
        base = entry.get("method", name)
        if base not in registry.METHODS:
            raise ConfigError(
                f"config key methods.{name}: unknown method {base!r}; "
                f"known: {sorted(registry.METHODS)} (set `method:` to use another name; a plugin "
                f"package adds methods through the entry point group {registry.METHOD_GROUP}: is "
                "it installed?)"
            )
        if is_searched(entry):
            search_space.of_entry(name, entry, config["generation"]["temperature"])
        else:
            method_points(name, entry, config["generation"]["temperature"])
    for name, pair in config["pairs"].items():
        if pair.get("draft") == SELF_DRAFT:  # Self-SD: the target drafts for itself
            pair["draft"] = pair["target"]
        for role in ("target", "draft"):
            ref = pair.get(role)
            if ref is None:
                continue
            key, what = f"pairs.{name}.{role}", f"pair {name!r}, role {role}"
            pair[role] = checked_model_ref(config, key, ref, what)
        check_model_files(name, pair)
        if "target_device_map" in pair:
            check_device_map(f"pairs.{name}.target_device_map", pair["target_device_map"])
    captioner = config.get("captioner")
    if captioner:
        ref = captioner["model"]
        captioner["model"] = checked_model_ref(config, "captioner.model", ref, "the captioner")
    for source in model_source.sources():
        source.check_config(config)
    _check_model_kinds(config)
    rows = [(str(i), rule) for i, rule in enumerate(config["sweep"])]
    rows += [(name, rule) for name, rule in config["sweep_extra"].items() if rule is not None]
    for row_name, rule in rows:
        where = f"sweep.{row_name}" if row_name.isdigit() else f"sweep_extra.{row_name}"
        for section in ("datasets", "pairs", "methods"):
            names = rule.get(section, "all")
            if names != "all":
                for n in names:
                    if n not in config[section]:
                        raise ConfigError(
                            f"config key {where}.{section}: unknown name {n!r}; "
                            f"known: {sorted(config[section])}"
                        )
    # the cells' order: the rows of `sweep`, then the extra rows
    config["sweep"] = [rule for _, rule in rows]
    config["sweep_extra"] = {}
    swept = cells(config)
    check_distinct(swept)
    # a search's cells are proposed in rounds: its corner points stand for them in the checks
    swept += search_runs.corner_cells(config)
    _check_search_metrics(config)
    for cell in swept:
        if cell.spec.needs(DRAFT_MODEL) and "draft" not in config["pairs"][cell.pair]:
            raise ConfigError(
                f"config key pairs.{cell.pair}.draft: method {cell.method!r} drafts with a draft "
                f"model (drafter {cell.spec.drafter!r}) but pair {cell.pair!r} names none"
            )
        _check_codebook_rule(config, cell)
        _check_target(config, cell)
        _check_visual_rule(config, cell)
        _check_head(config, cell)
        _check_task(config, cell)
    _check_image_metrics(config)
    _check_datasets(config)
    _check_task_metrics(config)
    _check_judge(config, swept)
    if captioner is None:
        uses_c = sorted({c.method for c in swept if c.spec.needs(CAPTIONS)})
        if uses_c:
            raise ConfigError(
                f"config key captioner: methods {uses_c} draft from captions (view C) but the "
                "config names no captioner"
            )
    check_ar_cells(swept)
    return config


def never_measured(config: dict, dataset: str, metric: str) -> str | None:
    """Why the cells table never holds `metric` (a cells-table column) on `dataset`, or None:
    FID only where the dataset makes images, the judge's only where it is judged."""
    if metric.startswith("fid") and dataset_task(config, dataset) != IMAGE_GENERATION:
        return "FID is measured on image generation datasets only"
    if metric.startswith("judge_") and not config["datasets"][dataset].get("judge"):
        return "it is measured on judged datasets only (a `judge:` template)"
    return None


def _check_search_metrics(config: dict) -> None:
    """A search's objectives and constraints are measured on each dataset it runs on."""
    for run in search_runs.runs(config):
        metrics = [o.metric for o in run.search.objectives]
        metrics += [c.metric for c in run.search.constraints]
        for metric in metrics:
            why = never_measured(config, run.dataset, metric)
            if why:
                raise ConfigError(
                    f"config key methods.{run.search.name}.search: {metric!r} is never measured "
                    f"on dataset {run.dataset!r}, where the sweep runs this search: {why}"
                )


# The keys of a dataset entry that scoring and the report read, not prepare: a change to them
# reruns no prepare job, nor (through its rewritten output) the cells that read it.
SCORING_KEYS = ("metric", "judge", "group", "note")


def prepare_entry(spec: dict) -> dict:
    """A dataset's config entry as its prepare job reads it (its scoring keys left out)."""
    return {k: v for k, v in spec.items() if k not in SCORING_KEYS}


def _check_datasets(config: dict) -> None:
    """Each dataset entry as its source's prepare job will read it (a Hugging Face entry's
    required columns, a toy scenario that exists), before any job rather than when its prepare
    job runs."""
    for name, spec in config["datasets"].items():
        try:
            dataset_source.of(spec).check(name, spec)
        except ValueError as error:
            raise ConfigError(f"config key datasets.{name}: {error}") from None


def _check_task_metrics(config: dict) -> None:
    """Each dataset's `metric` names a metric of the catalog (mmspec's, or an installed
    plugin's) that can score it."""
    for name, spec in config["datasets"].items():
        if "metric" not in spec or dataset_task(config, name) == IMAGE_GENERATION:
            continue  # its source's own metric; image generation: FID and CLIP score
        key = f"config key datasets.{name}.metric"
        try:
            metric = metric_catalog.get(spec["metric"])
        except metric_catalog.CatalogError as error:
            raise ConfigError(f"{key}: {error}") from None
        if not metric.higher_is_better:
            raise ConfigError(
                f"{key}: metric {metric.name!r} falls as quality rises, but retention (quality / "
                "AR quality) and the report read quality as rising (score its complement instead)"
            )
        if spec.get("conversation") and TEXT not in metric.takes:
            raise ConfigError(
                f"{key}: metric {metric.name!r} takes a list of answers, but each turn of a "
                "conversation has one answer text"
            )


def judged_datasets(config: dict, swept: list | None = None) -> list[str]:
    """The swept datasets (of `swept`, the config's cells) that name a judge template."""
    datasets = {c.dataset for c in (cells(config) if swept is None else swept)}
    return sorted(d for d in datasets if config["datasets"][d].get("judge"))


def _check_judge(config: dict, swept: list) -> None:
    judged = judged_datasets(config, swept)
    if judged and config.get("judge") is None:
        raise ConfigError(
            f"config key judge: datasets {judged} are scored by an LLM judge (`judge:`) but the "
            "config has no judge block (judge: {endpoint: embedded | <base URL>, model: ...})"
        )
    for name in judged:
        spec = config["datasets"][name]
        if spec["judge"] == "vdc" and "qa" not in spec.get("columns", {}):
            raise ConfigError(
                f"config key datasets.{name}.judge: template vdc asks each sample's questions "
                "(columns.qa, a column of {question, answer} lists), which the dataset does not map"
            )
    images = [d for d in judged if dataset_task(config, d) == IMAGE_GENERATION]
    if images:
        raise ConfigError(
            f"config key datasets.{images[0]}.judge: an image-generation dataset has no text "
            "answers to judge (FID and CLIP score it)"
        )


def _with_defaults(config: dict) -> dict:
    """A copy of a valid `config` with every default config/schema.yaml declares filled in (the
    one place defaults are written)."""
    config = json.loads(json.dumps(config))  # a deep copy of plain data
    config_schema.fill_defaults(config, jsonschema.Draft202012Validator(sweep_schema()))
    return config


def read_yaml(path: str | Path):
    """A YAML file's data; malformed YAML raises ConfigError naming the file and line."""
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        detail = f"{problem} ({context})" if context else problem
        raise ConfigError(f"{where}: malformed YAML: {' '.join(str(detail).split())}") from None


def _read_mapping(path: str | Path) -> dict:
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the file holds a {type(data).__name__}, not a mapping of config keys"
        )
    return data


def load(path: str | Path) -> dict:
    """Read and validate a config file."""
    return validate(_read_mapping(path), overrides={})


DEFAULT_CONFIG = "config/config.yaml"


def merge(base: dict, overrides: dict) -> dict:
    """`overrides` merged into a copy of `base` as Snakemake merges --config / --configfile:
    mappings recursively, any other value replacing the base's."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def is_whole_sweep(config: dict) -> bool:
    """Whether a config (files merged) is a whole sweep: it declares every key a sweep requires
    (config/schema.yaml: datasets, pairs, methods). Any other config overrides keys of the
    default sweep, so a file may add a dataset, a pair or a method to the tour or a preset
    without copying the rest (the Snakefile reads a config the same way)."""
    return all(key in config for key in config_schema.load()["required"])


def load_as_snakemake(
    paths: str | Path | list[str | Path], default: str | Path = DEFAULT_CONFIG
) -> dict:
    """Read and validate config files as `snakemake --configfile A B ...` reads them: merged in
    order (mappings recursively, so `sweep_extra` rows add up); if together they are a whole
    sweep (`is_whole_sweep`) that is the sweep, else they override the default sweep's keys
    (`default`, the Snakefile's config/config.yaml of the working directory)."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    data: dict = {}
    for path in paths:
        data = merge(data, _read_mapping(path))
    if is_whole_sweep(data):
        return validate(data, overrides={} if len(paths) == 1 else data)
    if not Path(default).is_file():
        missing = [k for k in config_schema.load()["required"] if k not in data]
        raise ConfigError(
            f"{', '.join(map(str, paths))} declare{'s' * (len(paths) == 1)} no "
            f"{' or '.join(f'`{k}`' for k in missing)}, so "
            f"{'it overrides' if len(paths) == 1 else 'they override'} the default sweep "
            f"{default}, which does not exist (relative to {os.getcwd()}): run from the "
            "workflow's directory or name the default sweep"
        )
    return validate(merge(_read_mapping(default), data), overrides=data)


def _check_model_kinds(config: dict) -> None:
    """Pairs and the captioner name models that generate: captioners, or two image generators
    sharing a codebook."""
    for name, pair in config["pairs"].items():
        roles = [role for role in ("target", "draft") if role in pair]
        kinds = {role: model_kind(config, pair[role]) for role in roles}
        for role, kind in kinds.items():
            if kind in ("fid_features", "clip"):
                raise ConfigError(
                    f"config key pairs.{name}.{role}: {pair[role]!r} is a {kind!r} network "
                    "(for image metrics), not a model that generates"
                )
        generators = [r for r, k in kinds.items() if k == IMAGE_GENERATOR]
        if generators and len(generators) != len(kinds):
            raise ConfigError(
                f"config key pairs.{name}: an image generator pairs only with another (target "
                f"and draft share a vocabulary of image codes), got {kinds}"
            )
        # (codebooks known only once loaded are compared when a job loads them)
        books = [codebook(config, pair[r]) for r in generators]
        if len(books) == 2 and None not in books:
            for key in books[0]:
                if books[0][key] != books[1][key]:
                    raise ConfigError(
                        f"config key pairs.{name}: target and draft must share a VQ codebook, "
                        f"but their {key} differ ({books[0][key]} and {books[1][key]})"
                    )
    captioner = config.get("captioner")
    if captioner and model_kind(config, captioner["model"]) not in (None, "captioner"):
        raise ConfigError(
            f"config key captioner.model: {captioner['model']!r} is not a captioning model"
        )


def _check_codebook_rule(config: dict, cell) -> None:
    """A rule that relaxes over a VQ codebook (LANTERN) needs a target with one, and k within
    it: a target whose kind is known now is checked here, others when the generate job loads
    them."""
    rule = cell.spec.acceptance
    if not cell.spec.needs(CODEBOOK):
        return
    target = config["pairs"][cell.pair]["target"]
    kind = model_kind(config, target)
    where = f"config key methods.{cell.method}"
    if kind is not None and kind != IMAGE_GENERATOR:
        raise ConfigError(
            f"{where}: acceptance {rule!r} relaxes over the target's VQ codebook, but pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r} with none"
        )


def _check_target(config: dict, cell) -> None:
    """Each component's own checks of the pair's target (`Component.check_target`: Kangaroo's
    exit layer within its layers, LANTERN's k within its codebook), on what is known now."""
    target = config["pairs"][cell.pair]["target"]
    codes = (codebook(config, target) or {}).get("codes")
    facts = TargetFacts(target, layers=language_layers(config, target), codes=codes)
    try:
        cell.spec.check_target(facts)
    except ValueError as error:
        raise ConfigError(
            f"config key methods.{cell.method}: {error} (pair {cell.pair!r})"
        ) from None


def _check_visual_rule(config: dict, cell) -> None:
    """A rule guided by the prompt's visual tokens (LVSpec) needs prompts with some: not an
    image-generation cell, whose prompt is a caption and whose target writes image codes."""
    rule = cell.spec.acceptance
    if not cell.spec.needs(HIDDEN_STATES):
        return
    target = config["pairs"][cell.pair]["target"]
    if dataset_task(config, cell.dataset) == IMAGE_GENERATION or (
        model_kind(config, target) == IMAGE_GENERATOR
    ):
        raise ConfigError(
            f"config key methods.{cell.method}: acceptance {rule!r} compares drafted tokens with "
            f"the prompt's visual tokens, and the cells of dataset {cell.dataset!r} with pair "
            f"{cell.pair!r} (target {target!r}) generate images from text prompts, which have "
            "none; sweep it over datasets with images or video"
        )


def _check_head(config: dict, cell) -> None:
    """A head drafter trains on a dataset of the config of the cell's task: text answers over
    a language model's hidden states, or (EAGLE's head only, LANTERN's drafter) images over an
    image generator's."""
    kind = cell.spec.drafter
    if not cell.spec.needs(TRAINED_HEAD):
        return
    data = cell.spec.head_training().get("head_data")
    where = f"config key methods.{cell.method}"
    if data is None:
        raise ConfigError(
            f"{where}: method {cell.spec.method!r} drafts with a trained {kind} head; name "
            "the dataset (a training split) it trains on with `head_data`"
        )
    if data not in config["datasets"]:
        raise ConfigError(
            f"{where}: head_data {data!r} names no dataset (known: {sorted(config['datasets'])})"
        )
    target = config["pairs"][cell.pair]["target"]
    images = dataset_task(config, cell.dataset) == IMAGE_GENERATION
    image_heads = components.image_head_drafters()
    if images and kind not in image_heads:
        raise ConfigError(
            f"{where}: a {kind} head drafts text, and dataset {cell.dataset!r} (pair "
            f"{cell.pair!r}, target {target!r}) generates images; image generation drafts with "
            f"a draft generator or a head of kind {' or '.join(image_heads)}"
        )
    if dataset_task(config, data) != dataset_task(config, cell.dataset):
        task = "generates images" if images else "answers in text"
        raise ConfigError(
            f"{where}: head_data {data!r} must be a dataset of the cell's own task: the head "
            f"learns the target's behaviour there, and dataset {cell.dataset!r} {task}"
        )
    if not images and model_kind(config, target) == IMAGE_GENERATOR:
        raise ConfigError(
            f"{where}: a {kind} head reads the hidden states of a language model, and pair "
            f"{cell.pair!r}'s target {target!r} is an image generator"
        )


def dataset_task(config: dict, name: str) -> str:
    """What a dataset's samples ask for, by its source: an answer (`media.ANSWER`), or an image
    (`media.IMAGE_GENERATION`)."""
    entry = config["datasets"][name]
    return dataset_source.of(entry).task(name, entry)


def _check_task(config: dict, cell) -> None:
    """Image-generation datasets go to image generators, and image generators only get them."""
    target = config["pairs"][cell.pair]["target"]
    images = dataset_task(config, cell.dataset) == IMAGE_GENERATION
    kind = model_kind(config, target)
    if images and kind not in (None, IMAGE_GENERATOR):
        raise ConfigError(
            f"config key sweep: dataset {cell.dataset!r} asks for images, and pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r}, which writes text; pair it "
            "with image generators"
        )
    if not images and kind == IMAGE_GENERATOR:
        raise ConfigError(
            f"config key sweep: pair {cell.pair!r} generates images, and dataset "
            f"{cell.dataset!r} asks for text answers; sweep it over an image-generation dataset"
        )
    drafter = cell.spec.drafter
    if images and not cell.spec.is_ar and drafter not in components.image_drafters():
        raise ConfigError(
            f"config key methods.{cell.method}: drafter {drafter!r} drafts text only, and "
            f"dataset {cell.dataset!r} generates images; image generation drafts with one of "
            f"{list(components.image_drafters())}"
        )


def _check_image_metrics(config: dict) -> None:
    """Image generation is scored by FID and CLIP score: their networks must be named, and be
    networks of the right kind, before any job runs."""
    images = {n for n in config["datasets"] if dataset_task(config, n) == IMAGE_GENERATION}
    swept = sorted({c.dataset for c in cells(config)} & images)
    metrics = config.get("image_metrics")
    if not swept:
        return
    if metrics is None:
        raise ConfigError(
            f"config key image_metrics: datasets {swept} generate images, scored by FID and "
            "CLIP score, and the config names no FID feature network or CLIP model "
            "(image_metrics: {fid_features: ..., clip: ...})"
        )
    for key in ("fid_features", "clip"):
        ref = checked_model_ref(config, f"image_metrics.{key}", metrics[key], f"the {key} network")
        metrics[key] = ref
        kind = model_kind(config, ref)
        if kind is not None and kind != key:
            raise ConfigError(
                f"config key image_metrics.{key}: {ref!r} is a {kind!r} model, not a {key!r} one"
            )
