"""One self-contained HTML page summarising a sweep, built from results/summary/cells.parquet.

The page opens offline from disk: plotly.js is inlined once in the head, figures are embedded as
JSON (not images), and there is no external CSS. Every string that comes from the data is
HTML-escaped, including those that plotly renders (hover text and legend names), because plotly
interprets a subset of HTML in them.
"""

from __future__ import annotations

import html
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs

from mmspec.tables import CELLS, read_table

# Method names of the plain autoregressive baseline (tau = 1 by construction).
AR_METHODS = {"ar"}

# Columns of the per-section method table, in display order.
TABLE_COLUMNS = [
    "method",
    "hp",
    "seed",
    "n_samples",
    "tau",
    "accepted_mean",
    "speedup",
    "speedup_eq1",
    "latency_ratio",
    "lossless_rate",
    "quality",
    "retention",
    "tokens_per_s",
    "prefill_s",
]
TEXT_COLUMNS = {"method", "hp"}
INT_COLUMNS = {"seed", "n_samples"}

MISSING = "–"

METRIC_DEFINITIONS = [
    ("step", "one target verification forward."),
    ("accepted", "draft tokens accepted at a step, not counting the bonus/correction token."),
    (
        "tau",
        "tokens emitted per step = mean(accepted + 1) pooled over all steps of a cell "
        "(tau_per_sample: the same averaged per sample-turn).",
    ),
    (
        "speedup",
        "AR decode time / method decode time on the same samples, same job, interleaved "
        "(prefill excluded, reported separately).",
    ),
    (
        "speedup_eq1",
        "tau / (gamma * c + 1) with c = T_q / T_p measured in the same job (TABED eq. 1) — "
        "the gap to measured speedup is engine overhead.",
    ),
    ("latency_ratio", "c."),
    (
        "lossless_rate",
        "share of sample-turns whose greedy output equals the AR output token for token "
        "(empty for sampling cells).",
    ),
    ("quality", "the dataset's task metric."),
    ("retention", "quality / AR quality."),
    ("tokens_per_s", "emitted tokens / decode time."),
]

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
h1 { margin-bottom: 0.2rem; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2rem; margin-top: 2.5rem; }
.meta { color: #555; }
dl.defs { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.defs dt { font-family: monospace; font-weight: bold; }
dl.defs dd { margin: 0; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
/* hp slugs are long; keep rows one line high and let wide tables scroll instead. */
td, th { white-space: nowrap; }
.scroll { overflow-x: auto; }
tr.best { font-weight: bold; }
tr.bug td { background: #fde8e8; }
td.bug-cell { color: #b00; font-weight: bold; }
.alert { color: #b00; font-weight: bold; }
/* auto-fill, not auto-fit: each figure is drawn while the page is still parsing, so its column
   must already have its final width when later figures of the row do not exist yet. */
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1rem; }
.figs > * { min-width: 0; }
.note { color: #666; font-style: italic; }
"""

FIGURE_HEIGHT = "420px"
FIGURE_CONFIG = {"displaylogo": False, "responsive": True}
# The empty template keeps each figure's JSON small (the default one adds ~10 kB per figure).
FIGURE_LAYOUT = dict(
    template="none",
    margin=dict(l=60, r=20, t=60, b=50),
    hovermode="closest",
    legend=dict(font=dict(size=10)),
)
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]


def write_report(cells_path: str | Path, out_html: str | Path) -> None:
    """Render the cells table at `cells_path` as one self-contained HTML page at `out_html`."""
    cells = read_table(cells_path, CELLS).to_pandas()
    page = render_page(cells, generated=datetime.now(UTC))
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so an interrupted run never leaves a truncated report behind.
    tmp = out_html.with_name(f".{out_html.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out_html)


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


def render_page(cells: pd.DataFrame, generated: datetime) -> str:
    """The full HTML page for a cells frame (one row per cell, CELLS columns)."""
    colors = method_colors(cells)
    keys = sorted(cells.groupby(["dataset", "pair"]).groups) if len(cells) else []
    sections = [
        render_section(f"sec-{i}", dataset, pair, section_cells(cells, dataset, pair), colors)
        for i, (dataset, pair) in enumerate(keys)
    ]
    body = "\n".join(
        [
            render_header(cells, generated, keys),
            render_definitions(),
            *sections,
            render_summary(cells),
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<title>mmspec report</title>\n"
        f"<style>{CSS}</style>\n"
        # Inlined once here, so every figure below embeds with include_plotlyjs=False.
        f"<script type='text/javascript'>{get_plotlyjs()}</script>\n"
        f"</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


# ---- formatting helpers ----------------------------------------------------------------------


def esc(value: object) -> str:
    """HTML-escaped text of a data value; missing values become a dash."""
    return MISSING if is_missing(value) else html.escape(str(value))


def is_missing(value: object) -> bool:
    """True for None, NaN and pandas' missing markers (but not for strings or lists)."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt_num(value: object, integer: bool = False) -> str:
    """A number with 2-3 significant decimals (integers as such); missing values as a dash."""
    if is_missing(value):
        return MISSING
    x = float(value)
    if integer or math.isinf(x):
        return str(int(x)) if not math.isinf(x) else str(x)
    magnitude = abs(x)
    if magnitude >= 100:
        return f"{x:.0f}"
    if magnitude >= 10:
        return f"{x:.1f}"
    if magnitude >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def is_ar(method: object) -> bool:
    """Whether a method name denotes the autoregressive baseline."""
    return isinstance(method, str) and method.lower() in AR_METHODS


def is_greedy(row: pd.Series) -> bool:
    """Whether a cell decodes greedily, so it must reproduce the AR output exactly."""
    return row.get("acceptance") == "greedy" or row.get("temperature") == 0


def lossless_bug(row: pd.Series) -> bool:
    """A greedy cell whose output differs from AR on some sample-turn: always an engine bug."""
    rate = row.get("lossless_rate")
    return is_greedy(row) and not is_missing(rate) and float(rate) < 1.0


def method_colors(cells: pd.DataFrame) -> dict[str, str]:
    """One colour per method, the same in every figure of the page."""
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
    methods = sorted(cells["method"].dropna().unique()) if len(cells) else []
    return {m: palette[i % len(palette)] for i, m in enumerate(methods)}


def sort_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """AR first, then by method, gamma (numerically, not as part of the hp slug), hp and seed."""
    key = cells.assign(_not_ar=~cells["method"].map(is_ar))
    key = key.sort_values(["_not_ar", "method", "gamma", "hp", "seed"], na_position="first")
    return key.drop(columns="_not_ar")


def section_cells(cells: pd.DataFrame, dataset: str, pair: str) -> pd.DataFrame:
    """The sorted cells of one (dataset, pair)."""
    mask = (cells["dataset"] == dataset) & (cells["pair"] == pair)
    return sort_cells(cells[mask]).reset_index(drop=True)


# ---- page parts ------------------------------------------------------------------------------


def render_header(cells: pd.DataFrame, generated: datetime, keys: list[tuple[str, str]]) -> str:
    """Title, provenance, a table of contents and an alert when any greedy cell is not lossless."""
    devices = sorted(cells["device"].dropna().unique()) if len(cells) else []
    n_bugs = int(sum(lossless_bug(row) for _, row in cells.iterrows()))
    alert = (
        f"<p class='alert'>⚠ {n_bugs} greedy cell(s) with lossless_rate &lt; 1 "
        "(highlighted in red below): greedy speculative decoding must reproduce AR exactly.</p>"
        if n_bugs
        else ""
    )
    toc = "".join(
        f"<li><a href='#sec-{i}'>{esc(dataset)} · {esc(pair)}</a></li>"
        for i, (dataset, pair) in enumerate(keys)
    )
    return (
        "<h1>mmspec report</h1>\n"
        f"<p class='meta'>Generated {generated.strftime('%Y-%m-%d %H:%M:%S %Z')} · "
        f"{len(cells)} cells · devices: {', '.join(esc(d) for d in devices) or MISSING}</p>\n"
        f"{alert}\n"
        f"<ul>{toc}<li><a href='#summary'>Cross-dataset summary</a></li></ul>"
    )


def render_definitions() -> str:
    """The metric glossary, so the numbers below are read the same way by everyone."""
    items = "".join(f"<dt>{term}</dt><dd>{text}</dd>" for term, text in METRIC_DEFINITIONS)
    return f"<h2>Metric definitions</h2>\n<dl class='defs'>{items}</dl>"


def render_section(
    anchor: str, dataset: str, pair: str, cells: pd.DataFrame, colors: dict[str, str]
) -> str:
    """One (dataset, pair): its method table and its two figures."""
    figures = [
        (speedup_quality_figure(cells, colors), "no cell has both a speedup and a quality"),
        (tau_gamma_figure(cells, colors), "no cell has a gamma"),
    ]
    figs = "".join(
        figure_html(fig) if fig is not None else f"<p class='note'>Not plotted: {why}.</p>"
        for fig, why in figures
    )
    return (
        f"<h2 id='{anchor}'>{esc(dataset)} · {esc(pair)}</h2>\n"
        f"{render_method_table(cells)}\n<div class='figs'>{figs}</div>"
    )


def render_method_table(cells: pd.DataFrame) -> str:
    """One row per cell; the best measured speedup in bold, non-lossless greedy cells in red."""
    best = cells["speedup"].max(skipna=True)
    head = "".join(f"<th>{c}</th>" for c in TABLE_COLUMNS)
    rows, bugs = [], []
    for _, row in cells.iterrows():
        bug = lossless_bug(row)
        classes = []
        if not is_missing(best) and row["speedup"] == best:
            classes.append("best")
        if bug:
            classes.append("bug")
            bugs.append(f"{esc(row['method'])} {esc(row['hp'])} seed {fmt_num(row['seed'], True)}")
        cls = f" class='{' '.join(classes)}'" if classes else ""
        tds = "".join(table_cell(row, column, bug) for column in TABLE_COLUMNS)
        rows.append(f"<tr{cls}>{tds}</tr>")
    note = (
        "<p class='alert'>⚠ lossless_rate &lt; 1 on greedy cell(s): "
        f"{'; '.join(bugs)}. Greedy decoding must match AR token for token — this is a bug.</p>"
        if bugs
        else ""
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f"<div class='scroll'>{table}</div>{note}"


def table_cell(row: pd.Series, column: str, bug: bool) -> str:
    """One <td>; the hp cell carries the full hyperparameter JSON as a tooltip."""
    value = row[column]
    if column in TEXT_COLUMNS:
        title = f" title='{esc(row['hparams'])}'" if column == "hp" else ""
        return f"<td{title}>{esc(value)}</td>"
    cls = "num bug-cell" if bug and column == "lossless_rate" else "num"
    return f"<td class='{cls}'>{fmt_num(value, integer=column in INT_COLUMNS)}</td>"


def hover_text(row: pd.Series) -> str:
    """Escaped hover label of a cell (plotly renders <br> but would also render data markup)."""
    return (
        f"{esc(row['method'])}<br>hp: {esc(row['hp'])}<br>seed: {fmt_num(row['seed'], True)}"
        f"<br>speedup {fmt_num(row['speedup'])} · quality {fmt_num(row['quality'])}"
        f"<br>tau {fmt_num(row['tau'])}"
    )


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
    front = points.iloc[pareto_front(list(zip(points["speedup"], points["quality"], strict=True)))]
    front = front.sort_values("speedup")
    # "vh" traces the boundary of the dominated region: quality drops as soon as speedup passes a
    # frontier point, since only faster points remain to the right of it.
    fig.add_trace(
        go.Scatter(
            x=front["speedup"],
            y=front["quality"],
            mode="lines+markers",
            name="Pareto front",
            line=dict(shape="vh", color="black", width=1.5, dash="dot"),
            marker=dict(symbol="diamond-open", size=15, color="black", line=dict(width=2)),
            hoverinfo="skip",
        )
    )
    title = "speedup vs quality"
    if len(points) < len(cells):
        title += f" ({len(cells) - len(points)} cell(s) missing)"
    fig.update_layout(
        title=title, xaxis_title="speedup (×)", yaxis_title="quality", **FIGURE_LAYOUT
    )
    return fig


def tau_gamma_figure(cells: pd.DataFrame, colors: dict[str, str]) -> go.Figure | None:
    """Tau vs gamma, one line per (method, view, acceptance), with AR as the tau = 1 reference."""
    drafted = cells.dropna(subset=["gamma", "tau"])
    drafted = drafted[~drafted["method"].map(is_ar)]
    if drafted.empty:
        return None
    fig = go.Figure()
    dash_of: dict[str, int] = {}
    groups = drafted.groupby(["method", "view", "acceptance"], dropna=False, sort=True)
    for (method, view, acceptance), group in groups:
        # Seeds and hyperparameters other than gamma share a point: average them, show the count.
        per_gamma = group.groupby("gamma")["tau"].agg(["mean", "size"]).reset_index()
        dash = dash_of[method] = dash_of.get(method, -1) + 1
        name = f"{esc(method)} · {esc(view)} · {esc(acceptance)}"
        fig.add_trace(
            go.Scatter(
                x=per_gamma["gamma"],
                y=per_gamma["mean"],
                mode="lines+markers",
                name=name,
                line=dict(color=colors.get(method), dash=DASHES[dash % len(DASHES)]),
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


def figure_html(fig: go.Figure) -> str:
    """A figure as a div plus its JSON; plotly.js itself is already in the page head."""
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        config=FIGURE_CONFIG,
        default_height=FIGURE_HEIGHT,
    )


def render_summary(cells: pd.DataFrame) -> str:
    """Per pair, tau and speedup of each method + hp across datasets (mean over seeds)."""
    parts = ["<h2 id='summary'>Cross-dataset summary</h2>"]
    if cells.empty:
        return parts[0] + "<p class='note'>No cells.</p>"
    parts.append("<p class='note'>Values are means over seeds.</p>")
    for pair in sorted(cells["pair"].dropna().unique()):
        of_pair = cells[cells["pair"] == pair]
        for metric in ("tau", "speedup"):
            parts.append(f"<h3>{metric} · {esc(pair)}</h3>{pivot_html(of_pair, metric)}")
    return "\n".join(parts)


def pivot_html(cells: pd.DataFrame, metric: str) -> str:
    """A method + hp by dataset table of `metric`, rows ordered like the section tables."""
    datasets = sorted(cells["dataset"].unique())
    rows_order = sort_cells(cells).drop_duplicates(["method", "hp"])[["method", "hp"]]
    means = cells.groupby(["method", "hp", "dataset"], dropna=False)[metric].mean()
    head = "<th>method</th><th>hp</th>" + "".join(f"<th>{esc(d)}</th>" for d in datasets)
    body = []
    for method, hp in rows_order.itertuples(index=False):
        values = "".join(
            f"<td class='num'>{fmt_num(means.get((method, hp, d)))}</td>" for d in datasets
        )
        body.append(f"<tr><td>{esc(method)}</td><td>{esc(hp)}</td>{values}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
