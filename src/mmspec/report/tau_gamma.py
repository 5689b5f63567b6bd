"""Tau against gamma in a (dataset, pair) section: one line per method, label and acceptance."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mmspec.report.cells import is_ar
from mmspec.report.figures import FIGURE_LAYOUT, figure_html, method_line
from mmspec.report.formatting import esc, label_html

MAX_GAMMA_TICKS = 20


def render(cells: pd.DataFrame, colors: dict[str, str]) -> str:
    """The figure of one section's cells, or a note when no cell has a gamma."""
    fig = tau_gamma_figure(cells, colors)
    if fig is None:
        return "<div class='figs'><p class='note'>Not plotted: no cell has a gamma.</p></div>"
    return f"<div class='figs'>{figure_html(fig)}</div>"


def tau_gamma_figure(cells: pd.DataFrame, colors: dict[str, str]) -> go.Figure | None:
    """Tau vs gamma, one line per (method, label and views, acceptance), with AR at tau = 1."""
    drafted = cells.dropna(subset=["gamma", "tau"])
    drafted = drafted[~drafted["method"].map(is_ar)]
    if drafted.empty:
        return None
    fig = go.Figure()
    dashes_used: dict[str, int] = {}
    groups = drafted.groupby(["method", "_name", "acceptance"], dropna=False, sort=True)
    for (method, name, acceptance), group in groups:
        # Seeds and hyperparameters other than gamma share a point: average them, show the count.
        per_gamma = group.groupby("gamma")["tau"].agg(["mean", "size"]).reset_index()
        name = f"{label_html(name)} · {esc(acceptance)}"
        fig.add_trace(
            go.Scatter(
                x=per_gamma["gamma"],
                y=per_gamma["mean"],
                mode="lines+markers",
                name=name,
                line=method_line(method, colors, dashes_used),
                customdata=per_gamma["size"],
                hovertemplate=f"{name}<br>gamma %{{x}} · tau %{{y:.3f}}"
                "<br>%{customdata} cell(s)<extra></extra>",
            )
        )
    if cells["method"].map(is_ar).any():
        fig.add_hline(y=1, line_dash="dash", line_color="grey", annotation_text="AR (tau = 1)")
    fig.update_layout(title="tau vs gamma", xaxis_title="gamma", yaxis_title="tau", **FIGURE_LAYOUT)
    if drafted["gamma"].nunique() <= MAX_GAMMA_TICKS:
        fig.update_xaxes(dtick=1)  # every gamma labelled, unless a long grid would crowd them
    return fig
