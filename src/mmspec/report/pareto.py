"""The frontiers, first on the page: per (dataset, pair), speedup against quality of every method
and hp with its seeds pooled, the Pareto front through them, and the front's rows as a table."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from mmspec.report import datatable
from mmspec.report.cells import lossless_bug
from mmspec.report.figures import FIGURE_LAYOUT, figure_html
from mmspec.report.formatting import MISSING, esc, fmt_num, heading, is_missing, label_html

ANCHOR = "frontier"
TITLE = "Pareto frontiers: speedup vs quality"
CAPTION = (
    "Per dataset and pair, each method and hp at its speedup and quality, means over its seeds, "
    "the bars their 95% intervals over the seeds (with one seed: the cell's bootstrap interval "
    "of the speedup; see the metric definitions). The dotted line and diamonds mark the Pareto "
    "front: no other point is both at least as fast and at least as good. Beside each figure the "
    "front's rows, slowest first; every row and seed is in the section's method table."
)
# (column, header) of the front's table; those with an interval show it in brackets
FRONT_COLUMNS = [
    ("n_seeds", "seeds"),
    ("speedup", "speedup"),
    ("quality", "quality"),
    ("tau", "τ"),
    ("retention", "retention"),
]


def render(pooled: pd.DataFrame, keys: list[tuple[str, str]], colors: dict[str, str]) -> str:
    """The section: per (dataset, pair) of `keys` with a point to plot, its figure and front."""
    parts = [heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>"]
    for dataset, pair in keys:
        of_key = pooled[(pooled["dataset"] == dataset) & (pooled["pair"] == pair)]
        title = f"{esc(dataset)} · {esc(pair)}{metric_note(of_key)}"
        fig = speedup_quality_figure(of_key, colors)
        if fig is None:
            parts.append(
                f"<h3>{title}</h3><p class='note'>Not plotted: no cell has both a speedup and "
                "a quality.</p>"
            )
            continue
        front = front_rows(sound(of_key))
        parts.append(
            f"<h3>{title}</h3><div class='figs'>{figure_html(fig)}"
            f"<div>{front_table(front)}</div></div>"
        )
    return "\n".join(parts)


def metric_note(cells: pd.DataFrame) -> str:
    """ " · quality: <metric>" for cells of one dataset ("" where no metric is recorded)."""
    names = sorted({m for m in cells.get("metric", pd.Series(dtype=str)).dropna() if m})
    return f" · quality: {esc(', '.join(names))}" if names else ""


def speedup_quality_figure(pooled: pd.DataFrame, colors: dict[str, str]) -> go.Figure | None:
    """Speedup vs quality, one point per pooled row with its intervals, and the Pareto front."""
    points = pooled.dropna(subset=["speedup", "quality"]).reset_index(drop=True)
    if points.empty:
        return None
    fig = go.Figure()
    for method, group in points.groupby("method", sort=True):
        bugs = [lossless_bug(row) for _, row in group.iterrows()]
        fig.add_trace(
            go.Scatter(
                x=group["speedup"].round(4).tolist(),
                y=group["quality"].round(4).tolist(),
                mode="markers",
                name=esc(method),
                marker=dict(
                    color=colors.get(method),
                    size=9,
                    symbol=["x" if bug else "circle" for bug in bugs],
                ),
                error_x=error_bars(group, "speedup"),
                error_y=error_bars(group, "quality"),
                text=[hover_text(row) for _, row in group.iterrows()],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.add_trace(front_trace(front_rows(sound(points))))
    title = "speedup vs quality"
    if len(points) < len(pooled):
        title += f" ({len(pooled) - len(points)} method/hp row(s) missing)"
    fig.update_layout(
        title=title, xaxis_title="speedup (×)", yaxis_title="quality", **FIGURE_LAYOUT
    )
    return fig


def error_bars(rows: pd.DataFrame, metric: str) -> dict:
    """Plotly error bars of `metric` from its _low and _high columns (none where missing)."""
    high = (rows[f"{metric}_high"] - rows[metric]).round(4)
    low = (rows[metric] - rows[f"{metric}_low"]).round(4)
    return dict(
        type="data",
        symmetric=False,
        array=high.where(high.notna(), 0).tolist(),
        arrayminus=low.where(low.notna(), 0).tolist(),
        thickness=1,
        width=2,
        visible=bool(high.notna().any()),
    )


def with_interval(row: pd.Series | dict, metric: str) -> str:
    """A mean with its interval, "1.52 [1.40, 1.64]", or the mean alone without one."""
    low, high = row.get(f"{metric}_low"), row.get(f"{metric}_high")
    if is_missing(low) or is_missing(high):
        return fmt_num(row.get(metric))
    return f"{fmt_num(row.get(metric))} [{fmt_num(low)}, {fmt_num(high)}]"


def hover_text(row: pd.Series) -> str:
    """Escaped hover label of a pooled row (plotly renders <br> but would also render data
    markup)."""
    text = (
        f"{label_html(row['_name'])} ({esc(row['method'])})<br>hp: {esc(row['hp'])}"
        f"<br>seeds: {fmt_num(row['n_seeds'], True)}"
        f"<br>speedup {with_interval(row, 'speedup')}"
        f"<br>quality {with_interval(row, 'quality')}"
        f"<br>tau {with_interval(row, 'tau')}"
    )
    if lossless_bug(row):
        text += f"<br>{BUG_NOTE}"
    return text


BUG_NOTE = "real divergences from AR (a bug): left off the front"


def sound(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows that may stand on a front: not a lossless rule's greedy cell with real
    divergences from AR (its speed is a bug's)."""
    if rows.empty:
        return rows
    return rows[[not lossless_bug(row) for _, row in rows.iterrows()]]


def front_table(front: pd.DataFrame) -> str:
    """The front's rows (a data table): name, hp, seeds and the plotted means with their
    intervals."""
    rows = [
        datatable.row(
            [
                str(row["_name"]),
                MISSING if is_missing(row["hp"]) else str(row["hp"]),
                *(
                    fmt_num(row[c], True) if c == "n_seeds" else with_interval(row, c)
                    for c, _ in FRONT_COLUMNS
                ),
            ]
        )
        for row in front.to_dict("records")
    ]
    headers = [h for _, h in FRONT_COLUMNS]
    return datatable.render(
        ["on the front", "hp", *headers],
        rows,
        numeric=set(headers),
        labels={"on the front"},
        table_class="front",
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
        x=front[x].round(4).tolist(),
        y=front[y].round(4).tolist(),
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
