"""What every figure of the page shares: layout, colours, line dashes, and its embedding as HTML.

Figures are embedded as JSON (not images); plotly.js itself is inlined once in the page head.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from mmspec.report.formatting import heading

FIGURE_HEIGHT = "420px"
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
# The empty template keeps each figure's JSON small (the default one adds ~10 kB per figure).
FIGURE_LAYOUT = dict(
    template="none",
    margin=dict(l=60, r=20, t=60, b=50),
    hovermode="closest",
    legend=dict(font=dict(size=10)),
)
PALETTE = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]


def method_colors(cells: pd.DataFrame) -> dict[str, str]:
    """One colour per method, the same in every figure of the page."""
    methods = sorted(cells["method"].dropna().unique()) if len(cells) else []
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(methods)}


def method_line(method: str, colors: dict[str, str], dashes_used: dict[str, int]) -> dict:
    """The line of a method's next trace: its colour, and the next dash among its traces."""
    dash = dashes_used[method] = dashes_used.get(method, -1) + 1
    return dict(color=colors.get(method), dash=DASHES[dash % len(DASHES)])


def figure_html(fig: go.Figure) -> str:
    """A figure as a div plus its JSON; plotly.js itself is already in the page head."""
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        config=FIGURE_CONFIG,
        default_height=FIGURE_HEIGHT,
    )


def figures_section(
    anchor: str, title: str, caption: str, figures: list[go.Figure], left_out: list[tuple[int, str]]
) -> str:
    """A section of figures: heading, caption, a note on what was left out, the grid of figures.

    `left_out` holds (count, what) pairs; those with a positive count make the note "count what".
    """
    notes = [f"{count} {what}" for count, what in left_out if count > 0]
    note = f"<p class='note'>{' '.join(notes)}</p>" if notes else ""
    figs = "".join(figure_html(fig) for fig in figures)
    return (
        f"{heading(anchor, title)}\n<p class='caption'>{caption}</p>\n"
        f"{note}<div class='figs'>{figs}</div>"
    )
