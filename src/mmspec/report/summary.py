"""The cross-dataset summary: per pair, tau and speedup of each method + hp on every dataset
(means over seeds), as tables that page, sort and filter."""

from __future__ import annotations

import pandas as pd

from mmspec.report import datatable
from mmspec.report.formatting import MISSING, esc, fmt_num, heading
from mmspec.report.pooled import interval_title

ANCHOR = "summary"
TITLE = "Cross-dataset summary"


def render(pooled: pd.DataFrame) -> str:
    """Per pair, a table of tau and one of speedup, from the seeds-pooled rows."""
    parts = [heading(ANCHOR, TITLE)]
    if pooled.empty:
        return parts[0] + "<p class='note'>No cells.</p>"
    parts.append(
        "<p class='note'>Values are means over seeds; a value's tooltip gives its seeds and its "
        "95% t interval over them.</p>"
    )
    for pair in sorted(pooled["pair"].dropna().unique()):
        of_pair = pooled[pooled["pair"] == pair]
        for metric in ("tau", "speedup"):
            parts.append(f"<h3>{metric} · {esc(pair)}</h3>{pivot_html(of_pair, metric)}")
    return "\n".join(parts)


def pivot_html(pooled: pd.DataFrame, metric: str) -> str:
    """A method + hp by dataset table of `metric`, rows ordered like the section tables."""
    pooled = pooled.assign(hp=pooled["hp"].fillna(""))
    datasets = sorted(pooled["dataset"].unique())
    by_key = {
        (row["_name"], row["hp"], row["dataset"]): row
        for _, row in pooled.drop_duplicates(["_name", "hp", "dataset"]).iterrows()
    }
    rows = []
    for name, hp in pooled[["_name", "hp"]].drop_duplicates().itertuples(index=False):
        values = [value_cell(by_key.get((name, hp, d)), metric) for d in datasets]
        rows.append(datatable.row([str(name), hp or MISSING, *values]))
    return datatable.render(
        ["method", "hp", *datasets], rows, numeric=set(datasets), labels={"method"}
    )


def value_cell(row: pd.Series | None, metric: str):
    """A pooled row's mean of `metric`, with its seeds and interval as the tooltip."""
    if row is None:
        return MISSING
    return datatable.cell(fmt_num(row[metric]), title=interval_title(row, metric))
