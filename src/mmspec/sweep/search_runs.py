"""A sweep's searches: each searched method entry on each dataset and pair its sweep rows give
it (a `Run`, id `dataset=<d>/pair=<p>/method=<m>`), and the cells of a searched point."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from mmspec.methods import registry
from mmspec.sweep import cells as mmcells
from mmspec.sweep import search_space as space
from mmspec.sweep.search_space import Search

ID_PATTERN = r"dataset=[^/]+/pair=[^/]+/method=[^/]+"


@dataclass(frozen=True)
class Run:
    """A search on one dataset and pair."""

    dataset: str
    pair: str
    search: Search

    @property
    def id(self) -> str:
        return f"dataset={self.dataset}/pair={self.pair}/method={self.search.name}"

    def round_path(self, round_: int, results: str = "results") -> str:
        return f"{results}/search/{self.id}/round-{round_}.json"


def searches(config: dict) -> dict[str, Search]:
    """The searched method entries of a validated config, by name."""
    temperature = config["generation"]["temperature"]
    return {
        name: space.of_entry(name, entry, temperature)
        for name, entry in config["methods"].items()
        if space.is_searched(entry)
    }


def runs(config: dict) -> list[Run]:
    """Every (dataset, pair) search of the sweep, in the order of its rows."""
    found = searches(config)
    out: dict[str, Run] = {}
    for row in config["sweep"]:
        for dataset, pair, name in itertools.product(
            _pick(row.get("datasets", "all"), config["datasets"]),
            _pick(row.get("pairs", "all"), config["pairs"]),
            _pick(row.get("methods", "all"), config["methods"]),
        ):
            if name in found:
                run = Run(dataset, pair, found[name])
                out.setdefault(run.id, run)
    return list(out.values())


def _pick(names, section: dict) -> list[str]:
    return list(section) if names == "all" else list(names)


def point_spec(search: Search, point: dict, temperature: float):
    """(hp slug, spec) of a searched point: the slug keys the values its components read."""
    hparams = search.hparams(point)
    spec = registry.resolve(search.method, hparams, temperature, strict=False)
    held = spec.to_dict()
    return mmcells.hp_slug({k: v for k, v in hparams.items() if k in held}), spec


def corner_cells(config: dict) -> list[mmcells.Cell]:
    """Cells standing for each search's space (its corner points at every seed): what the
    workflow checks before any job (models, hub files, judges, AR cells) and keeps built
    upstream. They are decoded only if a round proposes them."""
    temperature = config["generation"]["temperature"]
    out = []
    for run in runs(config):
        for point in space.corner_points(run.search):
            hp, spec = point_spec(run.search, point, temperature)
            for seed in config["seeds"]:
                out.append(mmcells.Cell(run.dataset, run.pair, run.search.name, hp, seed, spec))
    return out


def with_budget(config: dict, search_id: str, number: int, size: int) -> dict:
    """The config (budgets left out) with the budget that gives round `number` of the search
    `search_id` its `size` points: the budget as far as that round."""
    name = search_id.rsplit("method=", 1)[1]
    entry = config["methods"][name]
    block = entry[space.SEARCH_KEY]
    per_round = block.get("per_round", space.DEFAULT_PER_ROUND)
    budget = (number - 1) * per_round + size
    methods = {**config["methods"], name: {**entry, space.SEARCH_KEY: {**block, "budget": budget}}}
    return {**config, "methods": methods}
