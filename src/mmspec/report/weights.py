"""Ensemble weights over decoding (TABED Figure 3): the share of the multimodal view in the
drafter's ensemble at each step of a few sample-turns, over the blocks each step emitted."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import pyarrow.parquet as pq
from plotly.subplots import make_subplots

from mmspec.report.blocks import check_blocks_file
from mmspec.report.cells import (
    CELL_KEY,
    cell_key,
    dataset_order,
    key_of,
    labelled,
    sort_cells,
    view_tokens,
    with_labels,
)
from mmspec.report.figures import FIGURE_LAYOUT, figures_section
from mmspec.report.formatting import esc, fmt_num, heading, is_missing, label_html
from mmspec.storage.tables import BLOCKS

ANCHOR = "weights"
TITLE = "Ensemble weights over decoding"
# Sample-turns per figure, figures in all (keeps the page a few MB at most).
WEIGHT_SAMPLES = 3
MAX_WEIGHT_FIGURES = 12
# Which weight policies' figures come first when not every eligible cell is plotted.
POLICY_PLOT_ORDER = {"grid": 0, "softmax": 1, "kld": 2, "tvd": 3, "adaboost": 4, "random": 5}
ACCEPTED_COLOR = "rgba(44, 160, 44, 0.22)"
REJECTED_COLOR = "rgba(214, 39, 40, 0.22)"
# (all drafted tokens accepted, colour, legend name) of the two kinds of block shading.
BLOCK_KINDS = [
    (True, ACCEPTED_COLOR, "block: all drafted tokens accepted"),
    (False, REJECTED_COLOR, "block: a drafted token rejected"),
]
SHARE_REFERENCES = [(1.0, "M only"), (0.5, "static MT"), (0.0, "T only")]

# One verification step: (position, accepted, drafted).
Block = tuple[int, int, int]


def render(cells: pd.DataFrame, blocks: pd.DataFrame) -> str:
    """A figure for each of a few cells, from their rows of `blocks` (see `load_blocks`)."""
    targets = weight_plot_cells(labelled(cells))
    if targets.empty:
        return (
            f"{heading(ANCHOR, TITLE)}\n<p class='note'>No cell has an ensemble with both M and T "
            "views and a non-static weight policy.</p>"
        )
    by_cell = {key_of(key): steps for key, steps in blocks.groupby(CELL_KEY, sort=False)}
    figures, without_blocks, over_cap = [], 0, 0
    for _, cell in targets.iterrows():
        steps = by_cell.get(cell_key(cell))
        fig = weights_figure(cell, steps) if steps is not None else None
        if fig is None:
            without_blocks += 1
        elif len(figures) >= MAX_WEIGHT_FIGURES:
            over_cap += 1
        else:
            figures.append(fig)
    left_out = [
        (over_cap, "more cell(s) not plotted, to keep the page small."),
        (without_blocks, "cell(s) have no rows in the blocks table."),
    ]
    return figures_section(ANCHOR, TITLE, caption(targets["pair"].iloc[0]), figures, left_out)


def caption(pair: object) -> str:
    """What the weight figures show, stated exactly."""
    return (
        "Share of the multimodal view in the drafter's ensemble, w(M) / (w(M) + w(T)), at each "
        "verification step, against the number of output tokens emitted before that step; the "
        "step line holds a step's weights over its whole block (other views of the ensemble, e.g. "
        "C or P, are left out of the share). Shading: each step covers the tokens it emitted, "
        "[position, position + accepted + 1): the accepted draft tokens plus the target's "
        "bonus/correction token; <span style='background:" + ACCEPTED_COLOR + "'>green</span> "
        "when every token drafted at that step was accepted (accepted = drafted), "
        "<span style='background:" + REJECTED_COLOR + "'>red</span> when the target rejected one "
        "(accepted &lt; drafted). Dotted lines: 1 = M only, 0 = T only, 0.5 = the static MT "
        "ensemble (equal weights). Cells: ensembles with both M and T views and a non-static "
        f"weight policy, pair {esc(pair)}, first seed; the first {WEIGHT_SAMPLES} sample-turns "
        "by (sample_id, turn) of each."
    )


# ---- which cells and steps -------------------------------------------------------------------


def weight_plot_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells whose weights are plotted, in plotting order.

    Ensembles with both an M and a T view and a weight policy other than static; of the first pair
    that has any; the first seed of each (dataset, method, hp); TABED's own policy (grid) first, so
    that the figure cap keeps one figure of it per dataset, then by dataset, then like the tables.
    """
    if cells.empty:
        return cells
    tokens = cells["views"].map(view_tokens)
    policy = cells["weights"].map(lambda w: "" if is_missing(w) else str(w).lower())
    mask = tokens.map(lambda t: "M" in t and "T" in t) & ~policy.isin(["", "static"])
    eligible = cells[mask]
    if eligible.empty:
        return eligible
    eligible = eligible[eligible["pair"] == sorted(eligible["pair"].unique())[0]]
    eligible = eligible.sort_values("seed", kind="stable")
    eligible = eligible.drop_duplicates(["dataset", "method", "hp"])
    datasets, _ = dataset_order(eligible)
    ordered = pd.concat([sort_cells(eligible[eligible["dataset"] == d]) for d in datasets])
    rank = ordered["weights"].map(
        lambda w: POLICY_PLOT_ORDER.get(str(w).lower(), len(POLICY_PLOT_ORDER))
    )
    return ordered.iloc[rank.argsort(kind="stable").to_numpy()]


def load_blocks(blocks_path: str | Path, cells: pd.DataFrame) -> pd.DataFrame:
    """The rows of the blocks table that the weight plots can use (see `weight_plot_cells`).

    The table holds every step of every sample-turn of the sweep, so it is read in two filtered
    passes: the sample-turn keys of the plotted cells, then the steps of their first sample-turns.
    """
    path = check_blocks_file(blocks_path)
    empty = BLOCKS.empty_table().to_pandas()
    targets = weight_plot_cells(with_labels(cells))
    if targets.empty:
        return empty
    pair = targets["pair"].iloc[0]
    filters = [("pair", "=", pair), ("method", "in", sorted(targets["method"].unique()))]
    key_columns = ["dataset", "method", "hp", "seed", "sample_id", "turn"]
    keys = pq.read_table(path, columns=key_columns, filters=filters).to_pandas()
    keys = keys.drop_duplicates().merge(targets[["dataset", "method", "hp", "seed"]])
    first = keys.sort_values(["sample_id", "turn"]).groupby(["dataset", "method", "hp", "seed"])
    sample_ids = sorted(first.head(WEIGHT_SAMPLES)["sample_id"].unique())
    if not sample_ids:
        return empty
    filters.append(("sample_id", "in", sample_ids))
    return pq.read_table(path, columns=BLOCKS.names, filters=filters).to_pandas()


# ---- the figure ------------------------------------------------------------------------------


def weights_figure(cell: pd.Series, steps: pd.DataFrame) -> go.Figure | None:
    """The M share of one cell's first sample-turns as step lines over shaded blocks."""
    tokens = view_tokens(cell["views"])
    m, t = tokens.index("M"), tokens.index("T")
    turns = steps[["sample_id", "turn"]].drop_duplicates().sort_values(["sample_id", "turn"])
    turns = list(turns.head(WEIGHT_SAMPLES).itertuples(index=False, name=None))
    if not turns:
        return None
    fig = make_subplots(
        rows=len(turns),
        cols=1,
        vertical_spacing=0.12 if len(turns) > 1 else 0.0,
        subplot_titles=[f"sample {esc(s)} · turn {fmt_num(turn, True)}" for s, turn in turns],
    )
    shown: set[str] = set()
    for row, (sample_id, turn) in enumerate(turns, start=1):
        one = steps[(steps["sample_id"] == sample_id) & (steps["turn"] == turn)]
        one = one.sort_values("step")
        blocks = [
            (int(p), int(a), int(d))
            for p, a, d in zip(one["position"], one["accepted"], one["drafted"], strict=True)
        ]
        share = [weight_share(w, m, t, len(tokens)) for w in one["weights"]]
        add_block_shading(fig, row, blocks, shown)
        add_share_line(fig, row, blocks, share)
        add_share_references(fig, row)
    fig.update_yaxes(range=[-0.05, 1.05], tickvals=[0, 0.5, 1])
    fig.update_xaxes(title_text="output tokens emitted (position)", row=len(turns), col=1)
    layout = {
        **FIGURE_LAYOUT,
        "legend": dict(font=dict(size=10), orientation="h", x=0, y=-0.12, yanchor="top"),
        "margin": dict(l=50, r=70, t=70, b=90),
    }
    fig.update_layout(
        title=f"{esc(cell['dataset'])} · {label_html(cell['_name'])} · {esc(cell['hp'])}"
        f" · seed {fmt_num(cell['seed'], True)}",
        barmode="overlay",
        bargap=0,
        height=160 + 170 * len(turns),
        **layout,
    )
    return fig


def weight_share(weights: object, m: int, t: int, n_views: int) -> float | None:
    """w(M) / (w(M) + w(T)) of one step, rounded to 4 decimals; None when undefined."""
    if weights is None or is_missing(weights) or len(weights) != n_views:
        return None
    wm, wt = float(weights[m]), float(weights[t])
    if not wm + wt > 0:
        return None
    return round(wm / (wm + wt), 4)


def add_block_shading(fig: go.Figure, row: int, blocks: list[Block], shown: set[str]) -> None:
    """One bar per step over the tokens it emitted, green or red (see BLOCK_KINDS); each legend
    entry once per figure (`shown` holds those already there)."""
    for full, color, name in BLOCK_KINDS:
        kind = [(p, a) for p, a, d in blocks if (a == d) == full]
        if not kind:
            continue
        fig.add_trace(
            go.Bar(
                x=[p for p, _ in kind],
                y=[1] * len(kind),
                width=[a + 1 for _, a in kind],
                offset=0,
                base=0,
                marker=dict(color=color, line=dict(width=0)),
                name=name,
                legendgroup=name,
                showlegend=name not in shown,
                hoverinfo="skip",
            ),
            row=row,
            col=1,
        )
        shown.add(name)


def add_share_line(
    fig: go.Figure, row: int, blocks: list[Block], share: list[float | None]
) -> None:
    """The M share as a step line; the last step holds until its block ends."""
    last_position, last_accepted, _ = blocks[-1]
    per_step = [[a, d] for _, a, d in blocks]
    fig.add_trace(
        go.Scatter(
            x=[*(p for p, _, _ in blocks), last_position + last_accepted + 1],
            y=[*share, share[-1]],
            mode="lines",
            line=dict(shape="hv", color="black", width=1.5),
            name="w(M) / (w(M) + w(T))",
            legendgroup="share",
            showlegend=row == 1,
            customdata=per_step + [per_step[-1]],
            hovertemplate="position %{x} · M share %{y:.3f}"
            "<br>accepted %{customdata[0]} of %{customdata[1]} drafted<extra></extra>",
        ),
        row=row,
        col=1,
    )


def add_share_references(fig: go.Figure, row: int) -> None:
    """Dotted lines at the shares of M only, the static MT ensemble and T only; named on row 1."""
    for y, text in SHARE_REFERENCES:
        annotation = dict(annotation_text=text, annotation_position="right") if row == 1 else {}
        fig.add_hline(
            y=y,
            line_dash="dot",
            line_color="grey",
            line_width=1,
            row=row,
            col=1,
            **annotation,
        )
