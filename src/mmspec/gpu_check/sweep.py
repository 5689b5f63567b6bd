"""The sweep the check's workflow runs: a sweep (or an override of the tour) with the sampled
cells merged in."""

from __future__ import annotations

import copy
from pathlib import Path

from mmspec.gpu_check.settings import TOUR


def read_mapping(path: Path) -> dict:
    """A config file's keys."""
    from mmspec.sweep import config as mmconfig

    data = mmconfig.read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping of config keys")
    return data


def explicit_rules(config: dict) -> list[dict]:
    """The config's sweep rules with every name list spelled out, so that methods merged in later
    do not join a rule that says "all" (or says nothing)."""
    rules = copy.deepcopy(config.get("sweep", [{}]))
    for rule in rules:
        for section in ("datasets", "pairs", "methods"):
            if rule.get(section, "all") == "all":
                rule[section] = list(config.get(section, {}))
    return rules


def sweep_config(config: Path, sampled: Path | None) -> dict:
    """The whole sweep the check runs: `config` (or the tour it overrides) with the sampled
    cells' file merged in as Snakemake merges a config file, except that its `sweep` rules are
    appended to the config's rather than replacing them."""
    from mmspec.sweep import config as mmconfig

    base = read_mapping(config)
    if not mmconfig.is_whole_sweep(base):
        base = mmconfig.merge(read_mapping(TOUR), base)
    if sampled is None:
        return base
    extra = read_mapping(sampled)
    rules = explicit_rules(base) + extra.pop("sweep", [])
    merged = mmconfig.merge(base, extra)
    merged["sweep"] = rules
    return merged
