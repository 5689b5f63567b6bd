"""The sweep configuration: validation against config/schema.yaml, defaults, and cell expansion."""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from mmspec import schema as config_schema
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
from mmspec.models import families

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TOY_PREFIX = "toy:"


class ConfigError(ValueError):
    """A configuration problem, with the key path that caused it."""


@dataclass(frozen=True)
class Cell:
    """One generation job: (dataset, pair, method, hyperparameters, seed)."""

    dataset: str
    pair: str
    method: str  # the config entry's name
    hp: str  # slug of the hyperparameters given in the config
    seed: int
    spec: dict = field(hash=False, compare=False)  # the resolved method spec

    @property
    def path(self) -> str:
        """The key=value folder of this cell under results/generate and results/score."""
        return (
            f"dataset={self.dataset}/pair={self.pair}/method={self.method}/"
            f"hp={self.hp}/seed={self.seed}"
        )


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
    schema = _coercion_schema() if schema is None else schema
    return _coerce(value, schema, schema, jsonschema.Draft202012Validator(schema))


@functools.cache
def _coercion_schema() -> dict:
    """The config schema plus the types it leaves to later checks: method hyperparameters (from
    the registry; a list is a grid) and the devices of a device map (a GPU index)."""
    schema = copy.deepcopy(config_schema.load())
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


EMPTY_OVERRIDE_SECTIONS = ("methods", "datasets", "pairs")


def validate(config: dict, overrides: dict | None = None) -> dict:
    """Validate `config` (schema, then names and method hyperparameters); return it with defaults.

    Strings that stand for the numbers, booleans or nulls the schema expects (`--config`
    overrides) are converted first. `overrides` are what was merged into `config` (Snakemake's
    --config / --configfile values; the workflow passes them): an empty section among them is
    an error. Raises ConfigError naming the first offending key path.
    """
    check_overrides(overrides)
    config = coerce(config)
    validator = jsonschema.Draft202012Validator(config_schema.load())
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
        method_points(name, entry, config["generation"]["temperature"])
    for name, pair in config["pairs"].items():
        if pair.get("draft") == SELF_DRAFT:  # Self-SD: the target drafts for itself
            pair["draft"] = pair["target"]
        for role in ("target", "draft"):
            ref = pair.get(role)
            if ref is None:
                continue
            _check_local_model(f"pairs.{name}.{role}", ref, f"pair {name!r}, role {role}")
            pair[role] = normalize_model_ref(ref)
            if ref.startswith(TOY_PREFIX) and ref[len(TOY_PREFIX) :] not in config["toy"]["models"]:
                raise ConfigError(
                    f"config key pairs.{name}.{role}: {ref!r} names no model under toy.models "
                    f"(known: {sorted(config['toy']['models'])})"
                )
        _check_model_files(name, pair)
        if "target_device_map" in pair:
            _check_device_map(f"pairs.{name}.target_device_map", pair["target_device_map"])
    captioner = config.get("captioner")
    if captioner:
        _check_local_model("captioner.model", captioner["model"], "the captioner")
        captioner["model"] = normalize_model_ref(captioner["model"])
    if captioner and captioner["model"].startswith(TOY_PREFIX):
        if captioner["model"][len(TOY_PREFIX) :] not in config["toy"]["models"]:
            raise ConfigError(
                f"config key captioner.model: {captioner['model']!r} names no model under "
                f"toy.models (known: {sorted(config['toy']['models'])})"
            )
    _check_toy_kinds(config)
    for i, rule in enumerate(config["sweep"]):
        for section in ("datasets", "pairs", "methods"):
            names = rule.get(section, "all")
            if names != "all":
                for n in names:
                    if n not in config[section]:
                        raise ConfigError(
                            f"config key sweep.{i}.{section}: unknown name {n!r}; "
                            f"known: {sorted(config[section])}"
                        )
    swept = cells(config)
    _check_distinct(swept)
    for cell in swept:
        drafter = cell.spec["drafter"]
        if components.needs(cell.spec, DRAFT_MODEL) and "draft" not in config["pairs"][cell.pair]:
            raise ConfigError(
                f"config key pairs.{cell.pair}.draft: method {cell.method!r} drafts with a draft "
                f"model (drafter {drafter!r}) but pair {cell.pair!r} names none"
            )
        _check_codebook_rule(config, cell)
        _check_target(config, cell)
        _check_visual_rule(config, cell)
        _check_head(config, cell)
        _check_task(config, cell)
    _check_image_metrics(config)
    _check_judge(config, swept)
    if captioner is None:
        uses_c = sorted({c.method for c in swept if components.needs(c.spec, CAPTIONS)})
        if uses_c:
            raise ConfigError(
                f"config key captioner: methods {uses_c} draft from captions (view C) but the "
                "config names no captioner"
            )
    _check_toy_scenarios(config)
    _check_ar_cells(swept)
    return config


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


def toy_scenario(name: str, ds: dict) -> str:
    """The scenario of a toy dataset: its `scenario` key, else its name."""
    return ds.get("scenario", name)


def _check_toy_scenarios(config: dict) -> None:
    """A toy dataset's scenario is its name (or its `scenario` key), and toy models train on
    scenarios: unknown names are found here, not when the prepare or training job fails."""
    from mmspec.toy.world import DATASETS, HOUSE_STYLES, IMAGEGEN

    known = sorted(DATASETS)
    for name, ds in config["datasets"].items():
        scenario = toy_scenario(name, ds)
        if ds["source"] == "toy" and scenario not in DATASETS and scenario != IMAGEGEN:
            raise ConfigError(
                f"config key datasets.{name}: unknown toy scenario {scenario!r} (a toy "
                f"dataset's scenario is its name or its `scenario` key); known: "
                f"{[*known, IMAGEGEN]}"
            )
    for model, spec in config["toy"]["models"].items():
        for key in ("scenarios", "text_scenarios"):
            for scenario in spec.get(key, []):
                if scenario not in DATASETS:
                    raise ConfigError(
                        f"config key toy.models.{model}.{key}: unknown toy scenario "
                        f"{scenario!r}; known: {known}"
                    )
        style = spec.get("vdesc_style")
        if style is not None and style not in HOUSE_STYLES:
            raise ConfigError(
                f"config key toy.models.{model}.vdesc_style: unknown house style {style!r}; "
                f"known: {sorted(HOUSE_STYLES)}"
            )


DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _check_device_map(key: str, value) -> None:
    """A device_map as accelerate takes it: a placement strategy, or module name -> device.
    ("disk" offload is left out: it needs an offload folder and is too slow to time.)"""
    expected = (
        f"expected one of {', '.join(DEVICE_MAP_STRATEGIES)}, or a mapping of module name to "
        'device (a GPU index, "cuda:N" or "cpu")'
    )
    if isinstance(value, str):
        if value not in DEVICE_MAP_STRATEGIES:
            raise ConfigError(f"config key {key}: {value!r} is no placement strategy; {expected}")
        return
    if not value:
        raise ConfigError(f"config key {key}: an empty mapping; {expected}")
    for module, device in value.items():
        index = isinstance(device, int) and not isinstance(device, bool) and device >= 0
        if not (index or (isinstance(device, str) and _DEVICE_RE.match(device))):
            raise ConfigError(f"config key {key}.{module}: device {device!r}; {expected}")


# A Hugging Face hub id: owner/name of letters, digits, '_', '.', '-', neither part starting or
# ending with '.' or '-' (the hub also forbids '--' and '..' inside, checked apart).
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
HUB_ID_RE = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
LOCAL_PREFIXES = ("./", "../", "/", "~")


def is_hub_id(ref: str) -> bool:
    """Whether `ref` could name a hub repository (owner/name), not only a local path."""
    return bool(HUB_ID_RE.fullmatch(ref)) and "--" not in ref and ".." not in ref


def normalize_model_ref(ref: str) -> str:
    """A model reference in one spelling: local paths normalised ("./models/tgt" and
    "models/tgt/" -> "models/tgt", "~" expanded); hub ids and toy models unchanged."""
    if ref.startswith(TOY_PREFIX):
        return ref
    return os.path.normpath(os.path.expanduser(ref))  # an owner/name id is a fixed point


def _check_local_model(key: str, ref: str, what: str) -> None:
    """A reference that can only be a local path must be a directory here: found at parse time,
    not when the job that loads it fails. Hub ids need not be cached (the job downloads them)."""
    if ref.startswith(TOY_PREFIX):
        return
    if not ref:
        raise ConfigError(f"config key {key}: {what}: an empty model reference")
    path = Path(os.path.expanduser(ref))
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"config key {key}: {what}: {ref!r} is a file, not a model directory")
    if ref.startswith(LOCAL_PREFIXES) or not is_hub_id(ref):
        raise ConfigError(
            f"config key {key}: {what}: local model path {ref!r} does not exist (relative to "
            f"{os.getcwd()}), and it is no hub id of the form owner/name"
        )


def _check_model_files(name: str, pair: dict) -> None:
    """Models whose files are here (local folders, the HF cache): a supported family, and a
    draft tokenizer equal to the target's; checked before any job is submitted."""
    vocabularies = {}
    for role in ("target", "draft"):
        ref = pair.get(role)
        folder = None if ref is None or ref.startswith(TOY_PREFIX) else families.local_files(ref)
        if folder is None:
            continue  # trained by the workflow, or downloaded by the job
        model_config = json.loads((folder / "config.json").read_text())
        if families.generates_images(model_config):
            continue  # read by models.image_generation, not a VLM family
        try:
            families.check_config_dict(model_config, ref)
        except ValueError as e:
            raise ConfigError(f"config key pairs.{name}.{role}: {e}") from None
        vocabularies[role] = families.tokenizer_vocabulary(folder)
    target, draft = vocabularies.get("target"), vocabularies.get("draft")
    if target is not None and draft is not None and target != draft:
        raise ConfigError(
            f"config key pairs.{name}.draft: the draft's tokenizer ({len(draft)} tokens) differs "
            f"from the target's ({len(target)} tokens); speculative decoding needs a shared "
            "tokenizer"
        )


def _with_defaults(config: dict) -> dict:
    """A copy of a valid `config` with every default config/schema.yaml declares filled in (the
    one place defaults are written)."""
    config = json.loads(json.dumps(config))  # a deep copy of plain data
    config_schema.fill_defaults(config, jsonschema.Draft202012Validator(config_schema.load()))
    return config


def _grid(entry: dict) -> list[dict]:
    """Expand list values of a method entry into the Cartesian product of hyperparameter dicts.

    `paths` (a static tree) is itself a list of lists: it is a grid only when it is a list of
    such trees.
    """
    items = {k: v for k, v in entry.items() if k != "method"}
    keys = sorted(items)

    def grid(key, v):
        if key == "paths":
            is_trees = (
                isinstance(v, list)
                and bool(v)
                and all(isinstance(t, list) and all(isinstance(p, list) for p in t) for t in v)
            )
            return v if is_trees else [v]
        return v if isinstance(v, list) else [v]

    values = [grid(k, items[k]) for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def slug(value: str) -> str:
    """A safe, stable, readable path component for any string (HF ids with '/' included)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", value.replace("/", "--")).strip("-")
    if text != value:
        text = f"{text}-{hashlib.sha1(value.encode()).hexdigest()[:6]}"
    return text or "empty"


def hp_slug(hparams: dict) -> str:
    """The slug of a hyperparameter set: sorted key-value pairs, e.g. gamma-5_view-M."""
    if not hparams:
        return "default"
    parts = []
    for key in sorted(hparams):
        value = hparams[key]
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        parts.append(f"{key}-{text}")
    raw = "_".join(parts)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", raw)
    if safe != raw or len(safe) > 120:
        safe = f"{safe[:100]}-{hashlib.sha1(raw.encode()).hexdigest()[:8]}"
    return safe


def model_slug(ref: str) -> str:
    """The folder name of a model reference: toy:target -> toy-target, org/name -> org--name-<hash>;
    spellings of one local path share it ("./models/tgt" as "models/tgt")."""
    if ref.startswith(TOY_PREFIX):
        return "toy-" + ref[len(TOY_PREFIX) :]
    # The rules' `model` wildcard starts with a letter or digit: "../m" must not give "..--m-...".
    # The hash in the slug of such a path keeps it apart from a model named "m".
    return slug(normalize_model_ref(ref)).lstrip("._-") or "empty"


@dataclass(frozen=True)
class Expansion:
    """A sweep's cells, and how many grid points (dataset x pair x method entry x hyperparameter
    point x seed) they came from: points whose components read the same values are one cell."""

    cells: list[Cell]
    grid_points: int

    @property
    def merged(self) -> int:
        """Grid points that decode what another point's cell decodes."""
        return self.grid_points - len(self.cells)


def method_points(name: str, entry: dict, temperature: float) -> list[tuple[str, dict]]:
    """(hp slug, resolved spec) of each point of a method entry's grid. The slug keys only the
    values the point's components read, so points that differ in keys nobody reads share one
    (the caller keeps the first). A key of the entry read at no point is a ConfigError."""
    base = entry.get("method", name)
    points, read_somewhere = [], set()
    for hparams in _grid(entry):
        try:
            spec = registry.resolve(base, hparams, temperature, strict=False)
        except ValueError as e:
            raise ConfigError(f"config key methods.{name}: {e}") from None
        read = {k: v for k, v in hparams.items() if k in spec}
        read_somewhere |= set(read)
        points.append((hp_slug(read), spec))
    for key in entry:
        if key != "method" and key not in read_somewhere:
            spec = points[0][1]
            raise ConfigError(
                f"config key methods.{name}: {registry.unread_key_error(key, base, spec)}"
            )
    return points


def expand(config: dict) -> Expansion:
    """Every cell of the sweep, in a stable order, one per distinct decoding."""
    temperature = config["generation"]["temperature"]
    points = {
        name: method_points(name, entry, temperature) for name, entry in config["methods"].items()
    }
    combos: dict[tuple, None] = {}  # (dataset, pair, method entry, seed), once across rules
    for rule in config["sweep"]:
        combos.update(
            dict.fromkeys(
                (dataset, pair, name, int(seed))
                for dataset, pair, name, seed in itertools.product(
                    _pick(rule.get("datasets", "all"), config["datasets"]),
                    _pick(rule.get("pairs", "all"), config["pairs"]),
                    _pick(rule.get("methods", "all"), config["methods"]),
                    config["seeds"],
                )
            )
        )
    out: dict[tuple, Cell] = {}
    for dataset, pair, name, seed in combos:
        for hp, spec in points[name]:
            out.setdefault(
                (dataset, pair, name, hp, seed), Cell(dataset, pair, name, hp, seed, spec)
            )
    grid_points = sum(len(points[name]) for _, _, name, _ in combos)
    return Expansion(list(out.values()), grid_points)


def _check_distinct(swept: list[Cell]) -> None:
    """Two method entries that decode the same thing (the same components reading the same
    values) on the same dataset, pair and seed would spend the same compute twice."""
    seen: dict[tuple, Cell] = {}
    for cell in swept:
        decoding = {k: v for k, v in cell.spec.items() if k != "method"}
        key = (cell.dataset, cell.pair, cell.seed, json.dumps(decoding, sort_keys=True))
        other = seen.setdefault(key, cell)
        if other is not cell:
            raise ConfigError(
                f"config key methods.{cell.method}: its cell hp={cell.hp} decodes exactly what "
                f"methods.{other.method}'s cell hp={other.hp} decodes on dataset "
                f"{cell.dataset!r}, pair {cell.pair!r}, seed {cell.seed} (the same components "
                "reading the same values); sweep one of them there (a `sweep` rule, or a grid "
                "without that point)"
            )


def _check_ar_cells(swept: list[Cell]) -> None:
    """Every cell is scored against the AR cell of its dataset, pair, seed and temperature."""
    ar = {
        (c.dataset, c.pair, c.seed, c.spec["temperature"])
        for c in swept
        if c.spec["drafter"] == "none"
    }
    for cell in swept:
        if (cell.dataset, cell.pair, cell.seed, cell.spec["temperature"]) not in ar:
            raise ConfigError(
                f"config key sweep: cell {cell.path} (temperature {cell.spec['temperature']}) "
                "needs an `ar` cell with the same dataset, pair, seed and temperature for its "
                "lossless check and quality retention: sweep `ar` (or an entry of it at that "
                "temperature) there too"
            )


def cells(config: dict) -> list[Cell]:
    """Every cell of the sweep, in a stable order, one per distinct decoding."""
    return expand(config).cells


def ar_cell(config: dict, cell: Cell) -> Cell:
    """The AR cell that `cell` is compared against (same dataset, pair, seed, temperature)."""
    for other in cells(config):
        if (
            other.spec["method"] == "ar"
            and (other.dataset, other.pair, other.seed) == (cell.dataset, cell.pair, cell.seed)
            and other.spec["temperature"] == cell.spec["temperature"]
        ):
            return other
    raise ConfigError(
        f"cell {cell.path} needs an `ar` cell with the same dataset, pair, seed and temperature "
        "for its lossless check and quality retention: add `ar: {}` to methods"
    )


def _pick(names, section: dict) -> list[str]:
    return list(section) if names == "all" else list(names)


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


def load_as_snakemake(path: str | Path, default: str | Path = DEFAULT_CONFIG) -> dict:
    """Read and validate a config file as `snakemake --configfile PATH` reads it: a file that
    declares `datasets` is a whole sweep; any other file overrides the default sweep's keys
    (`default`, the Snakefile's config/config.yaml of the working directory)."""
    data = _read_mapping(path)
    if "datasets" in data:
        return validate(data, overrides={})
    if not Path(default).is_file():
        raise ConfigError(
            f"{path} declares no `datasets`, so it overrides the default sweep {default}, which "
            f"does not exist (relative to {os.getcwd()}): run from the workflow's directory or "
            "name the default sweep"
        )
    return validate(merge(_read_mapping(default), data), overrides=data)


def _toy_kind_keys() -> dict[str, set[str]]:
    """Every key one kind of toy recipe alone reads (config/schema.yaml: the `then` of its kind's
    part of a recipe's `allOf`); the other keys are common to all kinds."""
    recipe = config_schema.section("toy", "models")["additionalProperties"]
    keys = {}
    for part in recipe["allOf"]:
        kind = part["if"]["properties"]["kind"]["const"]
        keys[kind] = set(part["then"]["properties"])
    return keys


TOY_KIND_KEYS = _toy_kind_keys()
# The codebook of an image generator is fitted from these: a pair's two must agree on them.
CODEBOOK_KEYS = ("codes", "patch", "vq_images")


def model_kind(config: dict, ref: str) -> str | None:
    """The kind of model a reference names: a toy recipe's kind; for a real model whose files
    are here, "image_generator" if it generates images (Janus), else None (as for one not yet
    downloaded)."""
    if not ref.startswith(TOY_PREFIX):
        return "image_generator" if _local_image_generator(ref) else None
    return config["toy"]["models"][ref[len(TOY_PREFIX) :]].get("kind", "captioner")


@functools.cache
def _local_image_generator(ref: str) -> bool:
    """Whether a real model whose files are here generates images; read once per reference,
    not once per cell."""
    folder = families.local_files(ref)
    return folder is not None and families.generates_images(
        json.loads((folder / "config.json").read_text())
    )


def _check_toy_kinds(config: dict) -> None:
    """Each recipe sets only its kind's keys; pairs and the captioner name captioners, or two
    image generators sharing a codebook."""
    specific = set().union(*TOY_KIND_KEYS.values())
    for name, spec in config["toy"]["models"].items():
        kind = spec.get("kind", "captioner")
        stray = sorted((set(spec) & specific) - TOY_KIND_KEYS[kind])
        if stray:
            raise ConfigError(
                f"config key toy.models.{name}.{stray[0]}: not read by a {kind!r} recipe"
            )
    for name, pair in config["pairs"].items():
        roles = [role for role in ("target", "draft") if role in pair]
        kinds = {role: model_kind(config, pair[role]) for role in roles}
        for role, kind in kinds.items():
            if kind in ("fid_features", "clip"):
                raise ConfigError(
                    f"config key pairs.{name}.{role}: {pair[role]!r} is a {kind!r} network "
                    "(for image metrics), not a model that generates"
                )
        generators = [r for r, k in kinds.items() if k == "image_generator"]
        if generators and len(generators) != len(kinds):
            raise ConfigError(
                f"config key pairs.{name}: an image generator pairs only with another (target "
                f"and draft share a vocabulary of image codes), got {kinds}"
            )
        toys = [r for r in generators if pair[r].startswith(TOY_PREFIX)]
        if len(toys) == 2:  # (real generators' codebooks are compared when a job loads them)
            specs = [config["toy"]["models"][pair[r][len(TOY_PREFIX) :]] for r in toys]
            for key in CODEBOOK_KEYS:
                if specs[0][key] != specs[1][key]:
                    raise ConfigError(
                        f"config key pairs.{name}: target and draft must share a VQ codebook, "
                        f"but their {key} differ ({specs[0][key]} and {specs[1][key]})"
                    )
    captioner = config.get("captioner")
    if captioner and model_kind(config, captioner["model"]) not in (None, "captioner"):
        raise ConfigError(
            f"config key captioner.model: {captioner['model']!r} is not a captioning model"
        )


def _check_codebook_rule(config: dict, cell) -> None:
    """A rule that relaxes over a VQ codebook (LANTERN) needs a target with one, and k within
    it; toy targets are checked here, hub and local targets when the generate job loads them."""
    rule = cell.spec.get("acceptance")
    if not components.needs(cell.spec, CODEBOOK):
        return
    target = config["pairs"][cell.pair]["target"]
    kind = model_kind(config, target)
    where = f"config key methods.{cell.method}"
    if kind is not None and kind != "image_generator":
        raise ConfigError(
            f"{where}: acceptance {rule!r} relaxes over the target's VQ codebook, but pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r} with none"
        )


def _check_target(config: dict, cell) -> None:
    """Each component's own checks of the pair's target (`Component.check_target`: Kangaroo's
    exit layer within its layers, LANTERN's k within its codebook), on what is known now."""
    target = config["pairs"][cell.pair]["target"]
    toy = (
        config["toy"]["models"].get(target[len(TOY_PREFIX) :])
        if target.startswith(TOY_PREFIX)
        else None
    )
    codes = toy.get("codes") if toy and model_kind(config, target) == "image_generator" else None
    facts = TargetFacts(target, layers=_language_layers(config, target), codes=codes)
    for part in components.parts(cell.spec):
        try:
            part.check_target(cell.spec, facts)
        except ValueError as error:
            raise ConfigError(
                f"config key methods.{cell.method}: {error} (pair {cell.pair!r})"
            ) from None


def _check_visual_rule(config: dict, cell) -> None:
    """A rule guided by the prompt's visual tokens (LVSpec) needs prompts with some: not an
    image-generation cell, whose prompt is a caption and whose target writes image codes."""
    rule = cell.spec.get("acceptance")
    if not components.needs(cell.spec, HIDDEN_STATES):
        return
    target = config["pairs"][cell.pair]["target"]
    if dataset_task(config, cell.dataset) == IMAGE_GENERATION or (
        model_kind(config, target) == "image_generator"
    ):
        raise ConfigError(
            f"config key methods.{cell.method}: acceptance {rule!r} compares drafted tokens with "
            f"the prompt's visual tokens, and the cells of dataset {cell.dataset!r} with pair "
            f"{cell.pair!r} (target {target!r}) generate images from text prompts, which have "
            "none; sweep it over datasets with images or video"
        )


head_training = components.head_training


def drafter_dir(cell) -> str | None:
    """Where the trained head of a cell's head drafter lives (None for other drafters): one
    per (pair, kind, training hyperparameters), shared by every method that drafts with it."""
    kind = cell.spec["drafter"]
    if not components.needs(cell.spec, TRAINED_HEAD):
        return None
    return f"results/drafters/{cell.pair}/{kind}/{hp_slug(head_training(cell.spec))}"


def _check_head(config: dict, cell) -> None:
    """A head drafter trains on a dataset of the config of the cell's task: text answers over
    a language model's hidden states, or (EAGLE's head only, LANTERN's drafter) images over an
    image generator's."""
    kind = cell.spec["drafter"]
    if not components.needs(cell.spec, TRAINED_HEAD):
        return
    data = cell.spec.get("head_data")
    where = f"config key methods.{cell.method}"
    if data is None:
        raise ConfigError(
            f"{where}: method {cell.spec['method']!r} drafts with a trained {kind} head; name "
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
    if not images and model_kind(config, target) == "image_generator":
        raise ConfigError(
            f"{where}: a {kind} head reads the hidden states of a language model, and pair "
            f"{cell.pair!r}'s target {target!r} is an image generator"
        )


def _language_layers(config: dict, ref: str) -> int | None:
    """The decoder layers of a toy recipe or a local model's language model (None: unknown
    before its files are at hand)."""
    if ref.startswith(TOY_PREFIX):
        return config["toy"]["models"][ref[len(TOY_PREFIX) :]].get("layers")
    config_file = Path(ref).expanduser() / "config.json"
    if not config_file.is_file():
        return None
    model = json.loads(config_file.read_text())
    return (model.get("text_config") or model).get("num_hidden_layers")


def dataset_task(config: dict, name: str) -> str:
    """What a dataset's samples ask for: an answer (text), or an image (`media.IMAGE_GENERATION`:
    the toy world's image-generation scenario, or an HF dataset with `task: image_generation`)."""
    from mmspec.toy.world import IMAGEGEN

    ds = config["datasets"][name]
    if ds["source"] == "toy":
        return IMAGE_GENERATION if toy_scenario(name, ds) == IMAGEGEN else "answer"
    return ds.get("task", "answer")


def _check_task(config: dict, cell) -> None:
    """Image-generation datasets go to image generators, and image generators only get them."""
    target = config["pairs"][cell.pair]["target"]
    images = dataset_task(config, cell.dataset) == IMAGE_GENERATION
    kind = model_kind(config, target)
    if images and kind not in (None, "image_generator"):
        raise ConfigError(
            f"config key sweep: dataset {cell.dataset!r} asks for images, and pair "
            f"{cell.pair!r}'s target {target!r} is a {kind!r}, which writes text; pair it "
            "with image generators"
        )
    if not images and kind == "image_generator":
        raise ConfigError(
            f"config key sweep: pair {cell.pair!r} generates images, and dataset "
            f"{cell.dataset!r} asks for text answers; sweep it over an image-generation dataset"
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
        ref = metrics[key]
        _check_local_model(f"image_metrics.{key}", ref, f"the {key} network")
        metrics[key] = normalize_model_ref(ref)
        if not ref.startswith(TOY_PREFIX):
            continue
        if ref[len(TOY_PREFIX) :] not in config["toy"]["models"]:
            raise ConfigError(
                f"config key image_metrics.{key}: {ref!r} names no model under toy.models "
                f"(known: {sorted(config['toy']['models'])})"
            )
        if model_kind(config, ref) != key:
            raise ConfigError(
                f"config key image_metrics.{key}: {ref!r} is a {model_kind(config, ref)!r} "
                f"recipe, not a {key!r} one"
            )
