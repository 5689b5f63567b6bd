"""Block efficiency by dataset (TABED Table 1): tau of each method on each dataset, with the group
averages, one table per pair and acceptance setting."""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from mmspec.report.cells import dataset_order, hp_labels, labelled, sort_cells, without_ar
from mmspec.report.formatting import (
    MISSING,
    esc,
    fmt_num,
    heading,
    is_missing,
    label_html,
    rank_marks,
)

ANCHOR = "block-efficiency"
TITLE = "Block efficiency by dataset"
CAPTION = (
    "τ (tau, block efficiency) = tokens emitted per target verification step = new_tokens / steps "
    "pooled over the cell (a token accepted on the last step but cut by a stop token or "
    "max_new_tokens is not counted), then averaged over seeds. One table per pair and acceptance "
    "rule / temperature; one row per method (its label, plus the hyperparameters that differ "
    "when a label was run with several); AR (τ = 1) is left out. <i>avg &lt;group&gt;</i> = "
    "unweighted mean "
    "of τ over the group's datasets of the table, shown only when the row has every one of them; "
    "<i>avg all</i> = the same over all the datasets of the table. In each column the best value "
    "is <b>bold</b> and the second best <u>underlined</u> (equal values at the displayed precision "
    "share the mark)."
)


def render(cells: pd.DataFrame) -> str:
    """One table per (pair, acceptance, temperature) of the speculative cells."""
    parts = [heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>"]
    drafted = without_ar(cells)
    if drafted.empty:
        return "\n".join([*parts, "<p class='note'>No speculative cells.</p>"])
    settings = drafted.groupby(["pair", "acceptance", "temperature"], dropna=False, sort=True)
    for (pair, acceptance, temperature), of_setting in settings:
        temp = MISSING if is_missing(temperature) else f"{float(temperature):g}"
        parts.append(f"<h3>{esc(pair)} · {esc(acceptance)} · temperature {temp}</h3>")
        parts.append(table_html(tau_by_dataset(of_setting)))
    return "\n".join(parts)


def tau_by_dataset(cells: pd.DataFrame) -> pd.DataFrame:
    """Tau of each method row (mean over seeds) on each dataset, with the group and overall means.

    `cells` are those of one table (one pair and acceptance setting). The index holds the row
    names (display name, plus " · hp" when a display name has several hp values), in display
    order; the columns are pairs (kind, name): ("dataset", d) for each dataset, ("group", g) for
    each dataset group, then ("all", ""). A group or overall mean is NaN unless the row has a tau
    on every dataset it covers.
    """
    drafted = without_ar(labelled(cells))
    drafted = drafted.assign(hp=drafted["hp"].fillna(""))
    datasets, groups = dataset_order(drafted)
    columns = [("dataset", d) for d in datasets] + [("group", g) for g in groups] + [("all", "")]
    ordered = sort_cells(drafted)
    keys = list(dict.fromkeys(zip(ordered["_name"], ordered["hp"], strict=True)))
    n_hp = Counter(name for name, _ in keys)
    shown = hp_labels(drafted)
    means = drafted.groupby(["_name", "hp", "dataset"])["tau"].mean()
    rows = {}
    for name, hp in keys:
        per_dataset = {d: means.get((name, hp, d), math.nan) for d in datasets}
        values = [per_dataset[d] for d in datasets]
        for members in groups.values():
            values.append(mean_if_complete([per_dataset[d] for d in members]))
        values.append(mean_if_complete(list(per_dataset.values())))
        rows[f"{name} · {shown[(name, hp)]}" if n_hp[name] > 1 and hp else name] = values
    return pd.DataFrame.from_dict(
        rows, orient="index", columns=pd.MultiIndex.from_tuples(columns, names=["kind", "name"])
    )


def mean_if_complete(values: list[float]) -> float:
    """The mean of `values`, or NaN when any is missing (or there are none)."""
    if not values or any(is_missing(v) for v in values):
        return math.nan
    return sum(values) / len(values)


def table_html(table: pd.DataFrame) -> str:
    """A `tau_by_dataset` frame as HTML: best per column in bold, second best underlined."""
    head = ["<th>method</th>"]
    for kind, name in table.columns:
        if kind == "dataset":
            head.append(f"<th>{esc(name)}</th>")
        elif kind == "group":
            head.append(f"<th>avg {esc(name)}</th>")
        else:
            head.append("<th>avg all</th>")
    marks = {column: rank_marks(list(table[column])) for column in table.columns}
    body = []
    for i, name in enumerate(table.index):
        tds = [f"<td>{label_html(name)}</td>"]
        for column in table.columns:
            text = fmt_num(table[column].iloc[i])
            mark = marks[column][i]
            if mark == "best":
                text = f"<b>{text}</b>"
            elif mark == "second":
                text = f"<u>{text}</u>"
            tds.append(f"<td class='num'>{text}</td>")
        body.append(f"<tr>{''.join(tds)}</tr>")
    html = (
        f"<table class='tau-table'><thead><tr>{''.join(head)}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    return f"<div class='scroll'>{html}</div>"
