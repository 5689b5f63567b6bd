"""The sweep configuration: validation against config/schema.yaml (and the entry schemas of
the dataset sources it does not declare), defaults, and the checks across sections that run
before any job (each dataset and model by its source; cells by `cells`)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import jsonschema
import yaml

from mmspec import schema as config_schema
from mmspec.decoding.component import (
    CAPTIONS,
    DRAFT_MODEL,
)
from mmspec.methods import registry
from mmspec.methods.components import SELF_DRAFT
from mmspec.models import source as model_source
from mmspec.schema import ConfigError
from mmspec.sweep import config_checks as checks
from mmspec.sweep import config_values, search_runs, search_space
from mmspec.sweep.cells import cells, check_ar_cells, check_distinct, method_points
from mmspec.sweep.model_refs import (
    check_device_map,
    check_model_files,
    checked_model_ref,
)
from mmspec.sweep.search_space import is_searched

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_overrides(overrides: dict | None) -> None:
    """Overrides merge into the config's mappings, so an empty mapping of a section
    (`--config 'methods={}'`, or `methods: {}` in a partial --configfile) would merge nothing and
    be silently ignored: an error, naming the key."""
    for key in EMPTY_OVERRIDE_SECTIONS:
        if isinstance(overrides, dict) and overrides.get(key) == {}:
            raise ConfigError(
                f"config key {key}: an empty mapping given as an override merges nothing into "
                f"the config's {key} (it would be ignored); {config_values.EMPTY_HINTS[key]}"
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
    config = config_values.coerce(config)
    validator = jsonschema.Draft202012Validator(config_values.sweep_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError(config_values.describe(errors[0]))
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
                f"config key methods.{name}: unknown method {base!r}"
                f"{registry.close_matches(base, registry.METHODS)}; "
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
    checks.check_model_kinds(config)
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
    checks.check_search_metrics(config)
    for cell in swept:
        if cell.spec.needs(DRAFT_MODEL) and "draft" not in config["pairs"][cell.pair]:
            raise ConfigError(
                f"config key pairs.{cell.pair}.draft: method {cell.method!r} drafts with a draft "
                f"model (drafter {cell.spec.drafter!r}) but pair {cell.pair!r} names none"
            )
        checks.check_cell(config, cell)
    checks.check_image_metrics(config)
    checks.check_datasets(config)
    checks.check_task_metrics(config)
    checks.check_judge(config, swept)
    if captioner is None:
        uses_c = sorted({c.method for c in swept if c.spec.needs(CAPTIONS)})
        if uses_c:
            raise ConfigError(
                f"config key captioner: methods {uses_c} draft from captions (view C) but the "
                "config names no captioner"
            )
    check_ar_cells(swept)
    return config


def config_sources(configfiles: list, command_line: bool) -> str:
    """Where a run's config came from, for its errors: the config files (relative to here when
    inside it), and `--config` when values were given on the command line."""
    here = Path.cwd()
    named = []
    for f in map(Path, configfiles):
        f = f.absolute()
        named.append(str(f.relative_to(here)) if f.is_relative_to(here) else str(f))
    if command_line:
        named.append("--config")
    return ", ".join(named) or "no config file"


def _with_defaults(config: dict) -> dict:
    """A copy of a valid `config` with every default config/schema.yaml declares filled in (the
    one place defaults are written)."""
    config = json.loads(json.dumps(config))  # a deep copy of plain data
    validator = jsonschema.Draft202012Validator(config_values.sweep_schema())
    config_schema.fill_defaults(config, validator)
    return config


# The keys of a dataset entry that scoring and the report read, not prepare: a change to them
# reruns no prepare job, nor (through its rewritten output) the cells that read it.
SCORING_KEYS = ("metric", "judge", "group", "note")


def prepare_entry(spec: dict) -> dict:
    """A dataset's config entry as its prepare job reads it (its scoring keys left out)."""
    return {k: v for k, v in spec.items() if k not in SCORING_KEYS}


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
        return _validated(data, {} if len(paths) == 1 else data, paths)
    if not Path(default).is_file():
        missing = [k for k in config_schema.load()["required"] if k not in data]
        raise ConfigError(
            f"{', '.join(map(str, paths))} declare{'s' * (len(paths) == 1)} no "
            f"{' or '.join(f'`{k}`' for k in missing)}, so "
            f"{'it overrides' if len(paths) == 1 else 'they override'} the default sweep "
            f"{default}, which does not exist (relative to {os.getcwd()}): run from the "
            "workflow's directory or name the default sweep"
        )
    return _validated(merge(_read_mapping(default), data), data, [*paths, default])


def _validated(config: dict, overrides: dict, files: list) -> dict:
    """`validate`, its error saying which files the config came from."""
    try:
        return validate(config, overrides=overrides)
    except ConfigError as error:
        raise ConfigError(from_sources(error, files, False)) from None


def from_sources(error: ConfigError, configfiles: list, command_line: bool) -> str:
    """A config error's message followed by where the config came from (`config_sources`)."""
    return f"{error} (config from {config_sources(configfiles, command_line)})"
