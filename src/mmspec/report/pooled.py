"""Seeds pooled: one row per (dataset, pair, method, hp) with each metric's mean over the seeds and,
for the headline metrics, the 95% t interval of that mean over the seeds.

A sweep repeats its cells over seeds; the sweep's answer is what holds across them. A pooled row
has the columns of a cell: counts (SUMMED) are summed over the seeds, every other number is the
mean of the seeds' values, anything else is the first seed's. With one seed the pooled row is the
cell itself, its intervals the cell's own bootstrap intervals over its sample-turns.
"""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa

from mmspec.report.cells import sort_cells
from mmspec.report.formatting import fmt_num, is_missing
from mmspec.sweep import cell_metrics
from mmspec.sweep.cell_metrics import CELLS

POOL_KEY = ["dataset", "pair", "method", "hp"]
SUMMED = [m.name for m in cell_metrics.CELL_METRICS if m.summed]  # counts
# Numbers that the hp fixes (so the same on every seed): the first seed's, not a mean.
FIXED = ["seed", "gamma", "temperature"]
# Metrics whose pooled row carries <metric>_low and <metric>_high.
INTERVAL_METRICS = [
    "tau",
    "tau_turn1",
    "tau_turn2",
    "speedup",
    "quality",
    "retention",
    "judge_retention",
]
# Of those, the ones a single cell has an interval of (declared: cell_metrics).
CELL_INTERVALS = [m for m in INTERVAL_METRICS if cell_metrics.metric(m).interval]
# t(0.975, df) for df = 1..30; above, the Cornish-Fisher expansion (error < 1e-4).
T975 = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
]  # fmt: skip
Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def _numeric(cells: pd.DataFrame) -> list[str]:
    names = [f.name for f in CELLS if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
    return [n for n in names if n in cells and n not in POOL_KEY + FIXED + SUMMED]


def pool_seeds(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, pair, method, hp) of `cells` (labelled: `cells.with_labels`), in
    table order (`sort_cells`), with `n_seeds`, `seeds` (sorted) and `_members` (the index
    labels of its cells in `cells`, by seed). `seed` is the first seed's."""
    if cells.empty:
        return cells.assign(n_seeds=[], seeds=[], _members=[])
    numeric = _numeric(cells)
    keyed = cells.assign(
        **{k: cells[k].fillna("") for k in POOL_KEY},
        **{c: pd.to_numeric(cells[c], errors="coerce") for c in numeric + SUMMED if c in cells},
    )
    keyed = keyed.sort_values("seed", kind="stable")
    groups = keyed.groupby(POOL_KEY, sort=False, dropna=False)
    pooled = groups.first()
    pooled[numeric] = groups[numeric].mean()
    summed = [c for c in SUMMED if c in cells]
    pooled[summed] = groups[summed].sum(min_count=1)
    pooled["n_seeds"] = groups.size()
    pooled["seeds"] = groups["seed"].agg(list)
    positions = groups.indices
    pooled["_members"] = [list(keyed.index[positions[key]]) for key in pooled.index]
    metrics = [m for m in INTERVAL_METRICS if m in cells]
    counts, spread = groups[metrics].count(), groups[metrics].std(ddof=1)
    for metric in metrics:
        n = counts[metric]
        half = n.map(lambda k: t975(k - 1) if k >= 2 else math.nan) * spread[metric] / n**0.5
        low, high = pooled[metric] - half, pooled[metric] + half
        if metric in CELL_INTERVALS:  # one seed: the cell's own interval
            single = pooled["n_seeds"] == 1
            low = low.where(~single, pooled[f"{metric}_low"])
            high = high.where(~single, pooled[f"{metric}_high"])
        pooled[f"{metric}_low"], pooled[f"{metric}_high"] = low, high
    pooled = pooled.reset_index()
    for key in POOL_KEY:  # the missing keys that grouping filled in
        pooled[key] = pooled[key].where(pooled[key] != "", None)
    return sort_cells(pooled).reset_index(drop=True)


def interval_title(row: pd.Series | dict, metric: str) -> str:
    """The tooltip of a pooled row's mean of `metric`: its number of seeds and its 95% t interval
    over them; "" for a single seed."""
    n = row.get("n_seeds", 1)
    if is_missing(n) or n < 2:
        return ""
    title = f"mean of {int(n)} seeds"
    low, high = row.get(f"{metric}_low"), row.get(f"{metric}_high")
    if is_missing(low) or is_missing(high):
        return title
    return f"{title}; 95% t interval [{fmt_num(low)}, {fmt_num(high)}]"
