"""Stage prepare: a toy scenario or HF dataset -> results/prepared/<name>.parquet."""

from __future__ import annotations

import pyarrow as pa

from mmspec.tables import PREPARED, write_table


def run(name: str, spec: dict, out: str, toy_seed: int) -> int:
    """Write the prepared table of dataset `name`; returns the number of rows."""
    if spec["source"] == "toy":
        rows = toy_rows(name, spec, toy_seed)
        write_table(pa.Table.from_pylist(rows, schema=PREPARED), out, PREPARED)
        return len(rows)
    from mmspec.data.hf import prepare_hf

    return prepare_hf(name, spec, out)


def toy_rows(name: str, spec: dict, toy_seed: int) -> list[dict]:
    """The prepared rows of toy dataset `name` (its `scenario`, default its name)."""
    from mmspec.toy import world as toyworld

    seed = spec.get("seed", toy_seed)
    scenario = spec.get("scenario", name)
    if scenario == toyworld.IMAGEGEN:
        return toyworld.generate_imagegen_dataset(spec["samples"], seed)
    if scenario in toyworld.DATASETS:
        return toyworld.generate_dataset(scenario, spec["samples"], seed)
    known = sorted([*toyworld.DATASETS, toyworld.IMAGEGEN])
    raise ValueError(f"datasets.{name}: no toy scenario {scenario!r}; known: {known}")
