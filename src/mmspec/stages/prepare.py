"""Stage prepare: a toy scenario or HF dataset -> results/prepared/<name>.parquet."""

from __future__ import annotations

import pyarrow as pa

from mmspec.tables import PREPARED, write_table


def run(name: str, spec: dict, out: str, toy_seed: int) -> int:
    """Write the prepared table of dataset `name`; returns the number of rows."""
    if spec["source"] == "toy":
        from mmspec.data import toyworld

        if name not in toyworld.DATASETS:
            raise ValueError(
                f"datasets.{name}: no toy scenario of that name; known: {sorted(toyworld.DATASETS)}"
            )
        rows = toyworld.generate_dataset(name, spec["samples"], spec.get("seed", toy_seed))
        write_table(pa.Table.from_pylist(rows, schema=PREPARED), out, PREPARED)
        return len(rows)
    from mmspec.data.hf import prepare_hf

    return prepare_hf(name, spec, out)
