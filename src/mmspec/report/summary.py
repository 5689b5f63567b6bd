"""The cross-dataset summary: per pair, tau and speedup of each method + hp on every dataset."""

from __future__ import annotations

import pandas as pd

from mmspec.report.cells import sort_cells
from mmspec.report.formatting import esc, fmt_num, heading, label_html

ANCHOR = "summary"
TITLE = "Cross-dataset summary"


def render(cells: pd.DataFrame) -> str:
    """Per pair, a table of tau and one of speedup (mean over seeds)."""
    parts = [heading(ANCHOR, TITLE)]
    if cells.empty:
        return parts[0] + "<p class='note'>No cells.</p>"
    parts.append("<p class='note'>Values are means over seeds.</p>")
    for pair in sorted(cells["pair"].dropna().unique()):
        of_pair = cells[cells["pair"] == pair]
        for metric in ("tau", "speedup"):
            parts.append(f"<h3>{metric} · {esc(pair)}</h3>{pivot_html(of_pair, metric)}")
    return "\n".join(parts)


def pivot_html(cells: pd.DataFrame, metric: str) -> str:
    """A method + hp by dataset table of `metric`, rows ordered like the section tables."""
    cells = cells.assign(hp=cells["hp"].fillna(""))
    datasets = sorted(cells["dataset"].unique())
    rows_order = sort_cells(cells).drop_duplicates(["_name", "hp"])[["_name", "hp"]]
    means = cells.groupby(["_name", "hp", "dataset"])[metric].mean()
    head = "<th>method</th><th>hp</th>" + "".join(f"<th>{esc(d)}</th>" for d in datasets)
    body = []
    for name, hp in rows_order.itertuples(index=False):
        values = "".join(
            f"<td class='num'>{fmt_num(means.get((name, hp, d)))}</td>" for d in datasets
        )
        body.append(f"<tr><td>{label_html(name)}</td><td>{esc(hp)}</td>{values}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
