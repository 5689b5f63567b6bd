"""The blocks table (results/summary/blocks.parquet, one row per verification step), reduced to the
per-step statistics of the acceptance-by-position and tree sections."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmspec.report.cells import CELL_KEY, is_ar, key_of, without_ar
from mmspec.storage.tables import BLOCKS

# Group keys of the per-step statistics: the cell, the proposal depth (the drafted count where no
# depth was recorded, with `depth_recorded` false), the accepted path length.
STEP_STATS_KEY = [*CELL_KEY, "depth", "depth_recorded", "accepted"]
STEP_STATS_COLUMNS = [*STEP_STATS_KEY, "steps", "drafted_sum"]
STATS_BATCH_ROWS = 1 << 20


def check_blocks_file(blocks_path: str | Path) -> Path:
    """The path of a blocks table, checked to exist and to hold the contract's columns."""
    path = Path(blocks_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (has the stage that writes it run?)")
    names = pq.read_schema(path).names
    missing = [name for name in BLOCKS.names if name not in names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; expected the contract {BLOCKS.names}")
    return path


def load_step_stats(blocks_path: str | Path) -> pd.DataFrame:
    """Steps of each cell counted by (proposal depth, accepted path length), with their drafted sum.

    The blocks table holds every step of the sweep, so it is streamed in record batches of the few
    columns needed, each reduced to this histogram (a few rows per cell) before the next is read.
    """
    path = check_blocks_file(blocks_path)
    columns = [*CELL_KEY, "depth", "accepted", "drafted"]
    parts = []
    for batch in pq.ParquetFile(path).iter_batches(columns=columns, batch_size=STATS_BATCH_ROWS):
        table = pa.Table.from_batches([batch])
        depth = table["depth"]
        table = table.set_column(
            columns.index("depth"), "depth", pc.coalesce(depth, table["drafted"])
        ).append_column("depth_recorded", pc.is_valid(depth))
        parts.append(
            table.group_by(STEP_STATS_KEY).aggregate(
                [("drafted", "count", pc.CountOptions(mode="all")), ("drafted", "sum")]
            )
        )
    if not parts:
        return pd.DataFrame(columns=STEP_STATS_COLUMNS)
    merged = (
        pa.concat_tables(parts)
        .group_by(STEP_STATS_KEY)
        .aggregate([("drafted_count", "sum"), ("drafted_sum", "sum")])
    )
    merged = merged.rename_columns({"drafted_count_sum": "steps", "drafted_sum_sum": "drafted_sum"})
    return merged.select(STEP_STATS_COLUMNS).to_pandas()


# A cell's step statistics: STEP_STATS_COLUMNS, each as an array (thousands of cells: a small
# DataFrame per cell would cost more than the statistics themselves).
CellStats = dict[str, np.ndarray]


def step_stats_by_cell(cells: pd.DataFrame, stats: pd.DataFrame) -> dict[tuple, CellStats]:
    """Per drafting cell with steps (by `cell_key`): its rows of `stats` (see `load_step_stats`)."""
    if stats.empty or cells.empty:
        return {}
    known = set(map(key_of, zip(*(cells[c] for c in CELL_KEY), strict=True)))
    stats = stats[stats["seed"].notna()].sort_values(CELL_KEY, kind="stable")
    columns = {c: stats[c].to_numpy() for c in STEP_STATS_COLUMNS}
    keys = list(zip(*(columns[c] for c in CELL_KEY), strict=True))
    starts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
    found = {}
    for start, end in zip(starts, [*starts[1:], len(keys)], strict=True):
        key = key_of(keys[start])
        rows = {c: values[start:end] for c, values in columns.items()}
        if key in known and not is_ar(key[2]) and rows["steps"].sum() > 0:
            found[key] = rows
    return found


def drafting_cells(cells: pd.DataFrame, stats_by_cell: dict[tuple, CellStats]) -> pd.DataFrame:
    """The non-AR cells, with their steps and drafted nodes in the blocks table (`_steps`,
    `_drafted`) and mean tree size (`tree_size`, NaN without steps)."""
    drafted = without_ar(cells)
    if drafted.empty:
        return drafted.assign(tree_size=[], _key=[], _steps=[], _drafted=[])
    keys = list(map(key_of, zip(*(drafted[c] for c in CELL_KEY), strict=True)))
    n_steps = [stats_total(stats_by_cell, k, "steps") for k in keys]
    n_drafted = [stats_total(stats_by_cell, k, "drafted_sum") for k in keys]
    return drafted.assign(
        hp=drafted["hp"].fillna(""),
        tree_size=[d / n if n else math.nan for d, n in zip(n_drafted, n_steps, strict=True)],
        _key=keys,
        _steps=n_steps,
        _drafted=n_drafted,
    )


def stats_total(stats_by_cell: dict[tuple, CellStats], key: tuple, column: str) -> float:
    """The sum of `column` over a cell's step statistics; 0 for a cell without steps."""
    return float(stats_by_cell[key][column].sum()) if key in stats_by_cell else 0.0
