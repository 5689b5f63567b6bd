"""Trained drafter heads: how each head's training went (EAGLE's and DREAM's drafters).

One row per head folder (results/drafters/<pair>/<kind>/<training>/): its target, training
settings, sequences and time, and the held-out top-1 agreement with the target at the end; the
figure draws that agreement over the training steps (`curves.parquet`), one line per head.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import esc, fmt_num, heading
from mmspec.tables import HEAD_CURVES, read_table

ANCHOR = "drafter-heads"
TITLE = "Trained drafter heads"
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


def render(heads: list[dict]) -> str:
    """The section, or "" without trained heads."""
    if not heads:
        return ""
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
            f"<p class='caption'>{CAPTION}</p>",
            f"<div class='figs'>{figure_html(fig)}</div>",
            table,
        ]
    )
