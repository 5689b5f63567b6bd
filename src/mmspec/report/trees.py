"""Tree methods side by side (SAGE Table 1): per pair, tau, throughput, speedup and mean tree size
of each drafting method on each dataset, and tau against mean tree size."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from mmspec.decoding import catalog
from mmspec.report.blocks import CellStats, drafting_cells
from mmspec.report.cells import dataset_order, sort_cells
from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import esc, fmt_num, heading, label_html, rank_marks

ANCHOR = "tree-methods"
TITLE = "Tree methods side by side"
CAPTION = (
    "One table per pair; one row per drafting method and hp (tree policy: chain, static, dynamic "
    "or sage), ordered by tree policy. Per dataset: τ = new_tokens / steps, tokens/s = emitted "
    "tokens / decode time, speedup = AR / method decode time per emitted token (each averaged "
    "over seeds), and tree size = mean proposal nodes per step "
    "(<code>drafted</code>: gamma for a chain, the tree's node count for a token tree), pooled "
    "over the steps of all seeds in the blocks table; visual seen = the draft's share of the "
    "target's visual tokens (draft_visual_share). The best τ and the best speedup of each "
    "dataset are <b>bold</b> (equal values at the displayed precision share the mark). The "
    "figure: τ against mean tree size, one point per dataset and hp with its seeds pooled (τ "
    "their mean, the tree size over all their steps), one trace per method."
)
# (column, header) of each dataset's group of columns; tau and speedup get the best marks.
TREE_METRICS = [
    ("tau", "τ"),
    ("tokens_per_s", "tokens/s"),
    ("speedup", "speedup"),
    ("tree_size", "tree size"),
    ("draft_visual_share", "visual seen"),
]
TREE_MARKED = {"tau", "speedup"}


def render(cells: pd.DataFrame, stats_by_cell: dict[tuple, CellStats]) -> str:
    """The table and the figure of each pair with steps; "" without steps."""
    drafted = drafting_cells(cells, stats_by_cell)
    if drafted.empty or drafted["tree_size"].isna().all():
        return ""
    parts = [heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>"]
    for pair in sorted(drafted["pair"].dropna().unique()):
        of_pair = drafted[drafted["pair"] == pair]
        if of_pair["tree_size"].isna().all():
            continue
        datasets, _ = dataset_order(of_pair)
        parts.append(f"<h3>{esc(pair)}</h3>")
        parts.append(tree_table_html(tree_table(of_pair, datasets), datasets))
        fig = tau_tree_size_figure(of_pair, pair)
        if fig is not None:
            parts.append(f"<div class='figs'>{figure_html(fig)}</div>")
    return "\n".join(parts)


def tree_table(of_pair: pd.DataFrame, datasets: list[str]) -> pd.DataFrame:
    """One row per (name, hp) of a pair's drafting cells, by tree policy then table order.

    Columns ("", "name"), ("", "hp"), ("", "tree"), then (dataset, metric) per dataset and metric
    of TREE_METRICS: the tree size pooled over steps, the others averaged over seeds.
    """
    ordered = sort_cells(of_pair)
    order = list(catalog.components("tree"))  # the catalog's: chain, static, dynamic, sage, ...
    rank = ordered["tree"].map(lambda t: order.index(t) if t in order else len(order))
    ordered = ordered.iloc[rank.to_numpy().argsort(kind="stable")]
    rows = []
    for (name, hp), group in ordered.groupby(["_name", "hp"], sort=False):
        row = {
            ("", "name"): name,
            ("", "hp"): hp,
            ("", "tree"): group["tree"].iloc[0],
        }
        for dataset in datasets:
            row.update(dataset_metrics(group[group["dataset"] == dataset], dataset))
        rows.append(row)
    return pd.DataFrame(rows, columns=pd.MultiIndex.from_tuples(list(rows[0]) if rows else []))


def dataset_metrics(of_dataset: pd.DataFrame, dataset: str) -> dict[tuple[str, str], float]:
    """The (dataset, metric) columns of one row: tree size pooled over steps, the rest averaged."""
    metrics = {
        (dataset, column): of_dataset[column].astype(float).mean()
        for column, _ in TREE_METRICS
        if column != "tree_size"
    }
    n_steps = of_dataset["_steps"].sum()
    metrics[(dataset, "tree_size")] = (
        of_dataset["_drafted"].sum() / n_steps if n_steps else math.nan
    )
    return metrics


def tree_table_html(table: pd.DataFrame, datasets: list[str]) -> str:
    """A `tree_table` as HTML: a column group per dataset, the best τ and speedup in bold."""
    width = len(TREE_METRICS)
    head = (
        "<tr><th rowspan='2'>method</th><th rowspan='2'>hp</th><th rowspan='2'>tree</th>"
        + "".join(f"<th colspan='{width}'>{esc(d)}</th>" for d in datasets)
        + "</tr><tr>"
        + "".join(f"<th>{title}</th>" for _ in datasets for _, title in TREE_METRICS)
        + "</tr>"
    )
    best = {
        (d, c): [m == "best" for m in rank_marks(list(table[(d, c)]))]
        for d in datasets
        for c in TREE_MARKED
    }
    body = []
    for i in range(len(table)):
        tds = [
            f"<td>{label_html(table[('', 'name')].iloc[i])}</td>",
            f"<td>{esc(table[('', 'hp')].iloc[i])}</td>",
            f"<td>{esc(table[('', 'tree')].iloc[i])}</td>",
        ]
        for d in datasets:
            for column, _ in TREE_METRICS:
                text = fmt_num(table[(d, column)].iloc[i])
                if (d, column) in best and best[(d, column)][i]:
                    text = f"<b>{text}</b>"
                tds.append(f"<td class='num'>{text}</td>")
        body.append(f"<tr>{''.join(tds)}</tr>")
    return (
        f"<div class='scroll'><table class='tree-table'><thead>{head}</thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def tau_tree_size_figure(of_pair: pd.DataFrame, pair: str) -> go.Figure | None:
    """Tau against mean tree size, one point per (dataset, name, hp) with its seeds pooled (tree
    size over all their steps, tau their mean), one trace per method label."""
    points = pooled_points(of_pair)
    if points.empty:
        return None
    fig = go.Figure()
    for i, (name, group) in enumerate(points.groupby("_name", sort=False)):
        shown = label_html(name)
        fig.add_trace(
            go.Scatter(
                x=[round(float(x), 4) for x in group["tree_size"]],
                y=group["tau"].astype(float).tolist(),
                mode="markers",
                name=shown,
                marker=dict(color=PALETTE[i % len(PALETTE)], size=9),
                text=[point_text(shown, row) for _, row in group.iterrows()],
                hovertemplate="%{text}<br>tree size %{x:.2f} · tau %{y:.3f}<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"{esc(pair)} · tau vs mean tree size",
        xaxis_title="mean tree size (drafted nodes per step)",
        yaxis_title="tau",
        **FIGURE_LAYOUT,
    )
    return fig


def pooled_points(of_pair: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, name, hp) of the drafting cells with steps: its tree, seeds, mean
    tau, and tree size pooled over the steps of all its seeds."""
    cells = of_pair[of_pair["_steps"] > 0].dropna(subset=["tau"])
    groups = cells.groupby(["dataset", "_name", "hp"], sort=False)
    points = groups.agg(
        tree=("tree", "first"),
        tau=("tau", "mean"),
        seeds=("seed", "size"),
        _drafted=("_drafted", "sum"),
        _steps=("_steps", "sum"),
    ).reset_index()
    return points.assign(tree_size=points["_drafted"] / points["_steps"])


def point_text(shown: str, row: pd.Series) -> str:
    """Escaped hover label of one point; `shown` is its escaped display name."""
    return (
        f"{shown} ({esc(row['tree'])})<br>dataset: {esc(row['dataset'])}"
        f"<br>hp: {esc(row['hp'])}<br>seeds: {fmt_num(row['seeds'], True)}"
    )
