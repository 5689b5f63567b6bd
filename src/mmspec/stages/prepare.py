"""Stage prepare: a toy scenario or HF dataset -> results/prepared/<name>.parquet."""

from __future__ import annotations

import pyarrow as pa

from mmspec.tables import PREPARED, write_table


def run(name: str, spec: dict, out: str, toy_seed: int) -> int:
    """Write the prepared table of dataset `name`; returns the number of rows."""
    if spec["source"] == "toy":
        from mmspec.toy import world as toyworld

        seed = spec.get("seed", toy_seed)
        scenario = spec.get("scenario", name)
        if scenario == toyworld.IMAGEGEN:
            rows = toyworld.generate_imagegen_dataset(spec["samples"], seed)
        elif scenario in toyworld.DATASETS:
            rows = toyworld.generate_dataset(scenario, spec["samples"], seed)
        else:
            known = sorted([*toyworld.DATASETS, toyworld.IMAGEGEN])
            raise ValueError(f"datasets.{name}: no toy scenario {scenario!r}; known: {known}")
        write_table(pa.Table.from_pylist(rows, schema=PREPARED), out, PREPARED)
        return len(rows)
    from mmspec.data.hf import prepare_hf

    return prepare_hf(name, spec, out)
