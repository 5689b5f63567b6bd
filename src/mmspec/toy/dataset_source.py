"""The toy world as a dataset source: `source: toy`, a scenario's samples generated with their
exact answers (and graded by the embedded judge with the toy's rubric).

Light on purpose: config validation and every stage that reads the catalog import it, so it
imports neither torch nor the code that trains toy models, nor the rubrics that score them.
"""

from __future__ import annotations

import numpy as np

from mmspec.data.media import ANSWER, IMAGE_GENERATION
from mmspec.data.source import DatasetSource, register
from mmspec.toy import world

KIND = "toy"
METRIC = "toy"  # the task metric that scores toy datasets (toy.metric)


def scenario(name: str, entry: dict) -> str:
    """The scenario of a toy dataset: its `scenario` key, else its name."""
    return entry.get("scenario", name)


def scenarios() -> list[str]:
    """Every scenario a toy dataset may name."""
    return [*sorted(world.DATASETS), world.IMAGEGEN]


def rows(name: str, entry: dict, seed: int) -> list[dict]:
    """The prepared rows of toy dataset `name`; `seed`: the world's, unless the entry sets one."""
    picked, seed = scenario(name, entry), entry.get("seed", seed)
    if picked == world.IMAGEGEN:
        return world.generate_imagegen_dataset(entry["samples"], seed)
    if picked in world.DATASETS:
        return world.generate_dataset(picked, entry["samples"], seed)
    raise ValueError(f"datasets.{name}: no toy scenario {picked!r}; known: {scenarios()}")


@register
class ToyDatasets(DatasetSource):
    kind = KIND
    description = "a toy-world scenario, generated with its exact answers"
    rubric = "mmspec.toy.judge_rubric"
    size_key = "samples"

    def check(self, name: str, entry: dict) -> None:
        if scenario(name, entry) not in scenarios():
            raise ValueError(
                f"unknown toy scenario {scenario(name, entry)!r} (a toy dataset's scenario is "
                f"its name or its `scenario` key); known: {scenarios()}"
            )

    def task(self, name: str, entry: dict) -> str:
        return IMAGE_GENERATION if scenario(name, entry) == world.IMAGEGEN else ANSWER

    def metric(self, name: str, entry: dict) -> str:
        return METRIC

    def sample_turns(self, name: str, entry: dict, config: dict) -> int | None:
        return len(rows(name, entry, config["toy"]["seed"]))

    def has_second_turns(self, name: str, entry: dict) -> bool:
        make = world.DATASETS.get(scenario(name, entry))
        return make is not None and len(make(np.random.default_rng(0))) > 1

    def prepare(self, name: str, entry: dict, out: str, seed: int) -> int:
        import pyarrow as pa

        from mmspec.storage.tables import PREPARED, write_table

        prepared = rows(name, entry, seed)
        write_table(pa.Table.from_pylist(prepared, schema=PREPARED), out, PREPARED)
        return len(prepared)
