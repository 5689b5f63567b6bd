"""Acceptance rate by draft position (SAGE / EAGLE): per dataset of one pair, how often the
accepted path reaches each draft position, from the per-step statistics of the blocks table."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from mmspec.report.blocks import CellStats, drafting_cells
from mmspec.report.cells import dataset_order, sort_cells
from mmspec.report.figures import FIGURE_LAYOUT, figures_section, method_line
from mmspec.report.formatting import esc, label_html

ANCHOR = "acceptance-position"
TITLE = "Acceptance by draft position"
MAX_ACCEPTANCE_FIGURES = 8
MAX_ACCEPTANCE_LINES = 12

# One line of a figure: (display name, hp, method, the step statistics pooled over its seeds).
Line = tuple[str, str, str, pd.DataFrame]


def render(
    cells: pd.DataFrame, stats_by_cell: dict[tuple, CellStats], colors: dict[str, str]
) -> str:
    """Per dataset of the first pair with steps: acceptance-rate-by-position curves; "" if none."""
    pair, by_dataset = first_pair_lines(drafting_cells(cells, stats_by_cell), stats_by_cell)
    if not by_dataset:
        return ""
    datasets = list(by_dataset)
    figures, lines_left_out = [], 0
    for dataset in datasets[:MAX_ACCEPTANCE_FIGURES]:
        lines = by_dataset[dataset]
        lines_left_out += max(0, len(lines) - MAX_ACCEPTANCE_LINES)
        figures.append(acceptance_figure(dataset, lines[:MAX_ACCEPTANCE_LINES], colors))
    left_out = [
        (
            len(datasets) - MAX_ACCEPTANCE_FIGURES,
            "more dataset(s) not plotted, to keep the page small.",
        ),
        (lines_left_out, "more line(s) not plotted, to keep the figures readable."),
    ]
    return figures_section(ANCHOR, TITLE, caption(pair), figures, left_out)


def caption(pair: object) -> str:
    """What the acceptance-by-position figures show, stated exactly."""
    return (
        "Acceptance rate at draft position d, for d = 1 .. the largest proposal depth of the line: "
        "the share of verification steps whose accepted path length is &ge; d, among the steps "
        "whose proposal depth (levels: gamma for a chain, the tree depth for a token tree) is "
        "&ge; d. A chain of gamma = 2 therefore counts only toward d &le; 2, so chains of "
        "different gamma and trees of different depth share one scale. Steps are pooled over the "
        "sample-turns and seeds of a cell; one line per method (its label, plus the hp slug when "
        "a label ran with several hyperparameters); the hover gives the steps counted at each d. "
        f"Pair {esc(pair)}; one figure per dataset; tree methods are plotted first, then chains "
        f"(at most {MAX_ACCEPTANCE_LINES} lines and {MAX_ACCEPTANCE_FIGURES} figures)."
    )


def first_pair_lines(
    drafted: pd.DataFrame, stats_by_cell: dict[tuple, CellStats]
) -> tuple[object, dict[str, list[Line]]]:
    """The first pair (by name) with any line, and its lines per dataset, in table order."""
    drafted = drafted[drafted["_key"].map(stats_by_cell.__contains__)] if len(drafted) else drafted
    pair, by_dataset = None, {}
    for pair in sorted(drafted["pair"].dropna().unique()) if len(drafted) else []:
        of_pair = drafted[drafted["pair"] == pair]
        datasets, _ = dataset_order(of_pair)
        by_dataset = {
            d: acceptance_lines(of_pair[of_pair["dataset"] == d], stats_by_cell) for d in datasets
        }
        by_dataset = {d: lines for d, lines in by_dataset.items() if lines}
        if by_dataset:
            break
    return pair, by_dataset


def acceptance_lines(of_dataset: pd.DataFrame, stats_by_cell: dict[tuple, CellStats]) -> list[Line]:
    """The lines of one dataset's figure, in plotting order: trees before chains, each in table
    order; seeds of one (name, hp) are pooled.

    Where a step has no recorded depth the stats hold its drafted count instead, which is its depth
    only for a chain; such steps of other trees are left out.
    """
    ordered = sort_cells(of_dataset)
    ordered = ordered.iloc[(ordered["tree"] == "chain").to_numpy().argsort(kind="stable")]
    lines = []
    for (name, hp), group in ordered.groupby(["_name", "hp"], sort=False):
        pooled = pd.DataFrame(
            {
                column: np.concatenate([stats_by_cell[k][column] for k in group["_key"]])
                for column in ("depth", "depth_recorded", "accepted", "steps")
            }
        )
        if group["tree"].iloc[0] != "chain":
            pooled = pooled[pooled["depth_recorded"].astype(bool)]
        if (pooled["steps"][pooled["depth"] >= 1] > 0).any():
            lines.append((name, hp, str(group["method"].iloc[0]), pooled))
    return lines


def acceptance_figure(dataset: str, lines: list[Line], colors: dict[str, str]) -> go.Figure:
    """One line per (name, hp): acceptance rate against draft position."""
    fig = go.Figure()
    names = line_names([(name, hp) for name, hp, _, _ in lines])
    dashes_used: dict[str, int] = {}
    for name, hp, method, stats in lines:
        rates, reached = acceptance_curve(stats)
        shown = names[(name, hp)]
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(rates) + 1)),
                y=rates,
                mode="lines+markers",
                name=shown,
                line=method_line(method, colors, dashes_used),
                customdata=reached,
                hovertemplate=f"{shown}<br>hp: {esc(hp)}<br>position %{{x}} · accepted "
                "%{y:.3f}<br>of %{customdata} steps<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"{esc(dataset)} · acceptance by draft position",
        xaxis_title="draft position d",
        yaxis_title="P(accepted length ≥ d | depth ≥ d)",
        **FIGURE_LAYOUT,
    )
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(range=[0, 1.02])
    return fig


def line_names(keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Escaped display names of (name, hp) rows: the hp is appended when a name has several."""
    n_hp = Counter(name for name, _ in keys)
    return {
        (name, hp): label_html(name) + (f" · {esc(hp)}" if n_hp[name] > 1 and hp else "")
        for name, hp in keys
    }


def acceptance_curve(stats: pd.DataFrame) -> tuple[list[float], list[int]]:
    """Per draft position d = 1..max depth: the share of steps whose accepted path length is >= d
    among those whose proposal depth is >= d, and that number of steps (the denominator)."""
    depth = stats["depth"].astype(float).to_numpy()
    accepted = stats["accepted"].astype(float).to_numpy()
    n = stats["steps"].astype(float).to_numpy()
    top = int(depth.max()) if len(depth) and not math.isnan(depth.max()) else 0
    rates, reached = [], []
    for d in range(1, top + 1):
        deep = depth >= d
        total = n[deep].sum()
        rates.append(round(float(n[deep & (accepted >= d)].sum() / total), 4))
        reached.append(int(total))
    return rates, reached
