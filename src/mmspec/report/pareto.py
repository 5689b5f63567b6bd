"""The two figures of a (dataset, pair) section: speedup vs quality with its Pareto front, and tau
vs gamma."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from mmspec.report.cells import is_ar
from mmspec.report.figures import FIGURE_LAYOUT, figure_html, method_line
from mmspec.report.formatting import esc, fmt_num, label_html


def render(cells: pd.DataFrame, colors: dict[str, str]) -> str:
    """Both figures of one section's cells, each replaced by a note when it has nothing to plot."""
    figures = [
        (speedup_quality_figure(cells, colors), "no cell has both a speedup and a quality"),
        (tau_gamma_figure(cells, colors), "no cell has a gamma"),
    ]
    figs = "".join(
        figure_html(fig) if fig is not None else f"<p class='note'>Not plotted: {why}.</p>"
        for fig, why in figures
    )
    return f"<div class='figs'>{figs}</div>"


# ---- speedup vs quality ----------------------------------------------------------------------


def speedup_quality_figure(cells: pd.DataFrame, colors: dict[str, str]) -> go.Figure | None:
    """Speedup vs quality, one point per cell, with the Pareto frontier as a step line."""
    points = cells.dropna(subset=["speedup", "quality"]).reset_index(drop=True)
    if points.empty:
        return None
    fig = go.Figure()
    for method, group in points.groupby("method", sort=True):
        fig.add_trace(
            go.Scatter(
                x=group["speedup"],
                y=group["quality"],
                mode="markers",
                name=esc(method),
                marker=dict(color=colors.get(method), size=9),
                text=[hover_text(row) for _, row in group.iterrows()],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_trace(front_trace(front_rows(points)))
    title = "speedup vs quality"
    if len(points) < len(cells):
        title += f" ({len(cells) - len(points)} cell(s) missing)"
    fig.update_layout(
        title=title, xaxis_title="speedup (×)", yaxis_title="quality", **FIGURE_LAYOUT
    )
    return fig


def hover_text(row: pd.Series) -> str:
    """Escaped hover label of a cell (plotly renders <br> but would also render data markup)."""
    return (
        f"{label_html(row['_name'])} ({esc(row['method'])})<br>hp: {esc(row['hp'])}"
        f"<br>seed: {fmt_num(row['seed'], True)}"
        f"<br>speedup {fmt_num(row['speedup'])} · quality {fmt_num(row['quality'])}"
        f"<br>tau {fmt_num(row['tau'])}"
    )


def front_rows(points: pd.DataFrame, y: str = "quality", x: str = "speedup") -> pd.DataFrame:
    """The rows on the Pareto front of their (x, y), by x; rows missing either are left out."""
    points = points.dropna(subset=[x, y]).reset_index(drop=True)
    front = pareto_front(list(zip(points[x], points[y], strict=True)))
    return points.iloc[front].sort_values(x)


def front_trace(front: pd.DataFrame, y: str = "quality", x: str = "speedup") -> go.Scatter:
    """Front rows (`front_rows`) as a step line."""
    # "vh" traces the boundary of the dominated region: y drops as soon as x passes a frontier
    # point, since only points further right remain to the right of it.
    return go.Scatter(
        x=front[x],
        y=front[y],
        mode="lines+markers",
        name="Pareto front",
        line=dict(shape="vh", color="black", width=1.5, dash="dot"),
        marker=dict(symbol="diamond-open", size=15, color="black", line=dict(width=2)),
        hoverinfo="skip",
    )


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates, maximising both coordinates, ascending.

    A point is dominated when another has >= on both coordinates and > on at least one, so
    identical points are all kept. Points with a NaN coordinate are never on the front and
    dominate nothing.
    """
    valid = [i for i, (x, y) in enumerate(points) if not (math.isnan(x) or math.isnan(y))]
    # Sweep from the largest x down; a point survives if it is the highest of its x and strictly
    # higher than everything with a larger x. O(n log n), which matters for big sweeps.
    valid.sort(key=lambda i: -points[i][0])
    front: list[int] = []
    best_y = -math.inf
    start = 0
    while start < len(valid):
        end = start
        while end < len(valid) and points[valid[end]][0] == points[valid[start]][0]:
            end += 1
        same_x = valid[start:end]
        top = max(points[i][1] for i in same_x)
        if top > best_y:
            front.extend(i for i in same_x if points[i][1] == top)
            best_y = top
        start = end
    return sorted(front)


# ---- tau vs gamma ----------------------------------------------------------------------------


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
    fig.update_xaxes(dtick=1)
    return fig
