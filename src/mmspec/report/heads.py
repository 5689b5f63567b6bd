"""Trained drafters (DREAM's Table 1 and its baselines): the methods side by side, and how each
trained head's training went.

The table follows DREAM's Table 1: for every pair with a trained head, one row per speculative
method, and per temperature and dataset its speedup and tau (means over seeds), the best of a
column in bold. Below it one row per head folder (results/drafters/<pair>/<kind>/<training>/):
its target, training settings, sequences and time, and the held-out top-1 agreement with the
target at the end; the figure draws that agreement over the training steps (`curves.parquet`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from mmspec.methods.components import head_drafters
from mmspec.methods.registry import METHODS
from mmspec.report.cells import dataset_order, hp_labels, labelled, sort_cells, without_ar
from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import esc, fmt_num, heading, label_html, rank_marks
from mmspec.storage.tables import HEAD_CURVES, read_table

ANCHOR = "drafter-heads"
TITLE = "Trained drafters (DREAM's Table 1)"
TABLE_CAPTION = (
    "DREAM's Table 1 layout: each speculative method of a pair with a trained head (the rows "
    "that need no head, such as SPD's text-only draft, beside them), its speedup S over AR and "
    "mean accepted length τ per temperature and dataset (means over seeds); the best of a "
    "column is bold."
)
CAPTION = (
    "Each head was trained by stage train_drafter on its target's own answers to the training "
    "dataset (head_data) and its features. top-1 agreement: how often the head's most likely "
    "next token is the target's, on held-out training sequences (the last tenth), teacher-forced "
    "on the target's features; the accepted lengths of the method tables are what it buys."
)


def load_heads(folders: list[str | Path]) -> list[dict]:
    """Each head folder's training record and curve."""
    heads = []
    for folder in folders:
        folder = Path(folder)
        record = json.loads((folder / "training.json").read_text())
        record["curve"] = read_table(folder / "curves.parquet", HEAD_CURVES).to_pylist()
        record["folder"] = folder.as_posix()
        heads.append(record)
    return heads


def _name(head: dict) -> str:
    parts = Path(head["folder"]).parts
    return "/".join(parts[-3:])  # pair/kind/training


def uses_head(method: str) -> bool:
    registered = METHODS.get(method)
    return registered is not None and registered.defaults.get("drafter") in head_drafters()


def _rows(cells: pd.DataFrame) -> list[str]:
    """Each cell's row in the table: its method's paper name (so a method's greedy and sampling
    entries share a row), with the hyperparameters that differ (`hp_labels`) when the name has
    several cells at one temperature and dataset (a grid)."""
    names = [
        METHODS[m].label if m in METHODS and METHODS[m].label else entry
        for m, entry in zip(cells["registry_method"], cells["method"], strict=True)
    ]
    named = cells.assign(_label=names)
    counts = named.groupby(["_label", "temperature", "dataset"])["hp"].nunique()
    grids = {label for (label, _, _), n in counts.items() if n > 1}
    # what differs within a grid, but the temperature and rule the columns show and the entry's
    # name, so that a grid point's greedy and sampling cells share a row
    shown = hp_labels(named, name="_label", ignore=("temperature", "acceptance", "method"))
    return [
        f"{label} · {shown[(label, hp)]}" if label in grids else label
        for label, hp in zip(named["_label"], named["hp"], strict=True)
    ]


def table1(cells: pd.DataFrame) -> str:
    """DREAM's Table 1 per pair with a head method: S and τ per temperature and dataset."""
    if cells.empty or "registry_method" not in cells:
        return ""
    pairs = sorted(cells.loc[cells["registry_method"].map(uses_head), "pair"].unique())
    parts = []
    for pair in pairs:
        drafted = without_ar(labelled(cells[cells["pair"] == pair]))
        drafted = drafted.assign(hp=drafted["hp"].fillna(""), _row=_rows(drafted))
        datasets, _ = dataset_order(drafted)
        temperatures = sorted(drafted["temperature"].dropna().unique())
        columns = [(t, d, m) for t in temperatures for d in datasets for m in ("speedup", "tau")]
        means = drafted.groupby(["_row", "temperature", "dataset"])[["speedup", "tau"]].mean()
        shown = {}
        for label in dict.fromkeys(sort_cells(drafted)["_row"]):
            shown[label] = [
                means.loc[(label, t, d), m] if (label, t, d) in means.index else None
                for t, d, m in columns
            ]
        marks = [rank_marks([row[i] for row in shown.values()]) for i in range(len(columns))]
        head = "".join(
            f"<th>T={float(t):g} · {esc(d)} · {'S' if m == 'speedup' else 'τ'}</th>"
            for t, d, m in columns
        )
        body = []
        for r, (label, row) in enumerate(shown.items()):
            tds = []
            for i, value in enumerate(row):
                text = fmt_num(value)
                text = f"<b>{text}</b>" if marks[i][r] == "best" else text
                tds.append(f"<td class='num'>{text}</td>")
            body.append(f"<tr><td>{label_html(label)}</td>{''.join(tds)}</tr>")
        parts.append(
            f"<h3>{esc(pair)}</h3><div class='scroll'><table class='tau-table'><thead><tr>"
            f"<th>method</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    if not parts:
        return ""
    return "\n".join([f"<p class='caption'>{TABLE_CAPTION}</p>", *parts])


def render(cells: pd.DataFrame, heads: list[dict]) -> str:
    """The section, or "" without trained heads or cells drafting with one."""
    comparison = table1(cells)
    if not heads and not comparison:
        return ""
    if not heads:
        return "\n".join([heading(ANCHOR, TITLE), comparison])
    fig = go.Figure()
    for i, head in enumerate(heads):
        curve = head["curve"]
        fig.add_trace(
            go.Scatter(
                x=[row["step"] for row in curve],
                y=[row["heldout_top1"] for row in curve],
                mode="lines+markers",
                name=esc(f"{head['kind']} · {Path(head['folder']).parts[-3]}"),
                line=dict(color=PALETTE[i % len(PALETTE)]),
                hovertext=[esc(_name(head))] * len(curve),
                hovertemplate="%{hovertext}<br>step %{x}: top-1 %{y:.3f}<extra></extra>",
            )
        )
    fig.update_layout(
        title="held-out top-1 agreement with the target",
        xaxis_title="training step",
        yaxis_title="top-1 agreement",
        **FIGURE_LAYOUT,
    )
    rows = []
    for head in heads:
        final = head.get("final") or {}
        training = head["training"]
        rows.append(
            "<tr>"
            f"<td>{esc(head['kind'])}</td><td>{esc(head['target'])}</td>"
            f"<td>{esc(training.get('head_data'))}</td>"
            f"<td class='num'>{fmt_num(training.get('head_steps'), True)}</td>"
            f"<td class='num'>{fmt_num(training.get('head_lr'))}</td>"
            f"<td class='num'>{fmt_num(head['sequences'], True)}</td>"
            f"<td class='num'>{fmt_num(head['seconds'])}</td>"
            f"<td class='num'>{fmt_num(final.get('heldout_top1'))}</td>"
            f"<td class='note'>{esc(_name(head))}</td>"
            "</tr>"
        )
    table = (
        "<div class='scroll'><table><thead><tr><th>kind</th><th>target</th><th>data</th>"
        "<th>steps</th><th>lr</th><th>sequences</th><th>seconds</th><th>top-1 (held out)</th>"
        f"<th>folder</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
    return "\n".join(
        [
            heading(ANCHOR, TITLE),
            comparison,
            "<h3>Training of the heads</h3>",
            f"<p class='caption'>{CAPTION}</p>",
            f"<div class='figs'>{figure_html(fig)}</div>",
            table,
        ]
    )
