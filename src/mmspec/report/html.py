"""One self-contained HTML page summarising a sweep, built from results/summary/cells.parquet.

Optionally also from results/summary/blocks.parquet (one row per verification step), for the
acceptance rate by draft position, the tree methods side by side (mean tree size per step) and the
plots of the ensemble weights over decoding.

The page opens offline from disk: plotly.js is inlined once in the head, figures are embedded as
JSON (not images), and there is no external CSS. Every string that comes from the data is
HTML-escaped, including those that plotly renders (hover text and legend names), because plotly
interprets a subset of HTML in them.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from mmspec.tables import BLOCKS, CELLS, read_table

# Method names of the plain autoregressive baseline (tau = 1 by construction).
AR_METHODS = {"ar"}

# Canonical order of the view letters (DESIGN.md vocabulary), and of the ensemble weight policies:
# rows are ordered by them wherever methods are listed.
VIEW_ORDER = "MTCPUSV"
WEIGHT_POLICIES = ["static", "random", "kld", "tvd", "grid", "softmax", "adaboost"]
# Dataset groups whose average columns come first, in this order; any other group follows by name.
GROUP_ORDER = ["benchmark", "ood"]

# Columns of the per-section method table, in display order.
TABLE_COLUMNS = [
    "label",
    "method",
    "hp",
    "views",
    "weights",
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
    "caption_s",
    "draft_visual_share",
]
TEXT_COLUMNS = {"label", "method", "hp", "views", "weights"}
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
        "tau / (k * c + 1) with c = T_q / T_p measured in the same job and k the draft forwards "
        "per step (gamma for a chain; TABED eq. 1) — "
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
    (
        "prefill_s",
        "mean prompt prefill time per sample-turn, the draft's included (excluded from speedup).",
    ),
    (
        "draft_visual_share",
        "visual tokens the draft's prefill read / visual tokens the target's read, summed over "
        "the draft's views (1 for view M; about 1 - drop for SpecVLM's view S; 0 for T).",
    ),
    (
        "caption_s",
        "mean time the captioner took on a sample-turn's images (0 for methods without the C "
        "view). Captions are computed once per image in a cached stage, so this per-sample value "
        "is what captioning would cost without the cache; like prefill_s, it is not part of the "
        "decode time.",
    ),
    (
        "views",
        "what the drafter sees, one letter per view: M full visual tokens, T text only, C caption, "
        "P pooled, U/S/V pruned or compressed visual tokens. Several letters: an ensemble drafter "
        "whose per-view weights follow the <code>weights</code> policy.",
    ),
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
p.caption { max-width: 60rem; }
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

# Ensemble-weight plots: sample-turns per figure, figures in all (keeps the page a few MB at most).
WEIGHT_SAMPLES = 3
MAX_WEIGHT_FIGURES = 12
ACCEPTED_COLOR = "rgba(44, 160, 44, 0.22)"
REJECTED_COLOR = "rgba(214, 39, 40, 0.22)"
SHARE_REFERENCES = [(1.0, "M only"), (0.5, "static MT"), (0.0, "T only")]
CELL_KEY = ["dataset", "pair", "method", "hp", "seed"]


def write_report(
    cells_path: str | Path, out_html: str | Path, blocks_path: str | Path | None = None
) -> None:
    """Render the cells table at `cells_path` as one self-contained HTML page at `out_html`.

    With `blocks_path` (results/summary/blocks.parquet) the page also shows the acceptance rate by
    draft position, the tree methods side by side and the ensemble weights over decoding; without
    it those sections are left out.
    """
    cells = read_table(cells_path, CELLS).to_pandas()
    blocks = step_stats = None
    if blocks_path is not None:
        blocks = load_blocks(blocks_path, cells)
        step_stats = load_step_stats(blocks_path)
    page = render_page(cells, generated=datetime.now(UTC), blocks=blocks, step_stats=step_stats)
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


def check_blocks_file(blocks_path: str | Path) -> Path:
    """The path of a blocks table, checked to exist and to hold the contract's columns."""
    path = Path(blocks_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (has the stage that writes it run?)")
    names = pq.read_schema(path).names
    missing = [name for name in BLOCKS.names if name not in names]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; expected the contract {BLOCKS.names}")
    return path


# Group keys of the per-step statistics: the cell, the proposal depth (the drafted count where no
# depth was recorded, with `depth_recorded` false), the accepted path length.
STEP_STATS_KEY = [*CELL_KEY, "depth", "depth_recorded", "accepted"]
STEP_STATS_COLUMNS = [*STEP_STATS_KEY, "n_steps", "drafted_sum"]
STATS_BATCH_ROWS = 1 << 20


def load_step_stats(blocks_path: str | Path) -> pd.DataFrame:
    """Steps of each cell counted by (proposal depth, accepted path length), with their drafted sum.

    The blocks table holds every step of the sweep, so it is streamed in record batches of the few
    columns needed, each reduced to this histogram (a few rows per cell) before the next is read.
    """
    path = check_blocks_file(blocks_path)
    columns = [*CELL_KEY, "depth", "accepted", "drafted"]
    parts = []
    for batch in pq.ParquetFile(path).iter_batches(columns=columns, batch_size=STATS_BATCH_ROWS):
        table = pa.Table.from_batches([batch])
        depth = table["depth"]
        table = table.set_column(
            columns.index("depth"), "depth", pc.coalesce(depth, table["drafted"])
        ).append_column("depth_recorded", pc.is_valid(depth))
        parts.append(
            table.group_by(STEP_STATS_KEY).aggregate(
                [("drafted", "count", pc.CountOptions(mode="all")), ("drafted", "sum")]
            )
        )
    if not parts:
        return pd.DataFrame(columns=STEP_STATS_COLUMNS)
    merged = (
        pa.concat_tables(parts)
        .group_by(STEP_STATS_KEY)
        .aggregate([("drafted_count", "sum"), ("drafted_sum", "sum")])
    )
    merged = merged.rename_columns(
        {"drafted_count_sum": "n_steps", "drafted_sum_sum": "drafted_sum"}
    )
    return merged.select(STEP_STATS_COLUMNS).to_pandas()


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


def render_page(
    cells: pd.DataFrame,
    generated: datetime,
    blocks: pd.DataFrame | None = None,
    step_stats: pd.DataFrame | None = None,
) -> str:
    """The full HTML page for a cells frame (one row per cell, CELLS columns).

    `blocks` (BLOCKS columns, possibly only some of its rows) adds the ensemble-weight plots;
    `step_stats` (from `load_step_stats`, over all the rows) the acceptance rate by draft position
    and the tree methods side by side, each shown only when some cell has steps for it.
    """
    cells = with_labels(cells)
    colors = method_colors(cells)
    keys = sorted(cells.groupby(["dataset", "pair"]).groups) if len(cells) else []
    sections = [
        render_section(f"sec-{i}", dataset, pair, section_cells(cells, dataset, pair), colors)
        for i, (dataset, pair) in enumerate(keys)
    ]
    steps = steps_by_cell(cells, step_stats) if step_stats is not None else {}
    acceptance = render_acceptance_by_position(cells, steps, colors) if steps else ""
    trees = render_tree_methods(cells, steps) if steps else ""
    extra_toc = [
        (anchor, title)
        for part, anchor, title in (
            (acceptance, "acceptance-position", ACCEPTANCE_TITLE),
            (trees, "tree-methods", TREE_TITLE),
        )
        if part
    ]
    body = "\n".join(
        [
            render_header(
                cells, generated, keys, with_weights=blocks is not None, extra_toc=extra_toc
            ),
            render_definitions(),
            *sections,
            render_block_efficiency(cells),
            acceptance,
            trees,
            render_weights(cells, blocks) if blocks is not None else "",
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


def is_ar_row(row: pd.Series) -> bool:
    """Whether a cell is the autoregressive baseline (by its method name or its label)."""
    return is_ar(row.get("method")) or is_ar(row.get("label"))


def is_greedy(row: pd.Series) -> bool:
    """Whether a cell decodes greedily, so it must reproduce the AR output exactly."""
    return row.get("acceptance") == "greedy" or row.get("temperature") == 0


def lossless_bug(row: pd.Series) -> bool:
    """A greedy cell whose output differs from AR on some sample-turn: always an engine bug."""
    rate = row.get("lossless_rate")
    return is_greedy(row) and not is_missing(rate) and float(rate) < 1.0


def view_tokens(views: object) -> list[str]:
    """The views of a `views` string, one per capital letter with its parameters ("U0.5")."""
    return re.findall(r"[A-Z][^A-Z]*", views) if isinstance(views, str) else []


def display_name(row: pd.Series) -> str:
    """The label of a cell, plus its views when the label does not already spell them.

    Paper labels do ("TABED^MT", "M"); a config method name does not, and one config entry may
    expand over several views, whose rows must stay apart.
    """
    label = row.get("label")
    name = str(label) if not is_missing(label) and label != "" else str(row.get("method"))
    views = row.get("views")
    if isinstance(views, str) and views and views not in name:
        name = f"{name} · {views}"
    return name


def label_html(text: object) -> str:
    """An escaped display name, with the paper's "^MT" suffixes as superscripts."""
    return re.sub(r"\^(\w+)", r"<sup>\1</sup>", esc(text))


def with_labels(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with a label on every row (the method name where none) and a `_name` column."""
    cells = cells.copy()
    if "label" not in cells:
        cells["label"] = None
    cells["label"] = cells["label"].where(cells["label"].notna(), cells["method"])
    cells["_name"] = [display_name(row) for _, row in cells.iterrows()] if len(cells) else []
    return cells


def method_colors(cells: pd.DataFrame) -> dict[str, str]:
    """One colour per method, the same in every figure of the page."""
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
    methods = sorted(cells["method"].dropna().unique()) if len(cells) else []
    return {m: palette[i % len(palette)] for i, m in enumerate(methods)}


def _missing_first(value: object) -> tuple:
    """A sort key that puts missing values first and compares the others as they are."""
    return (0, 0) if is_missing(value) else (1, value)


def cell_rank(row: pd.Series) -> tuple:
    """Sort key of a cell: AR, then single views, ensembles, drafters without views (trained heads);
    within each, by views (canonical letter order), weight policy, method, gamma, hp and seed."""
    tokens = view_tokens(row.get("views"))
    kind = 0 if is_ar_row(row) else 1 if len(tokens) == 1 else 2 if tokens else 3
    view_key = tuple(
        (VIEW_ORDER.index(t[0]) if t[0] in VIEW_ORDER else len(VIEW_ORDER), t) for t in tokens
    )
    policy = row.get("weights")
    policy = "" if is_missing(policy) else str(policy)
    policy_key = (
        WEIGHT_POLICIES.index(policy) if policy in WEIGHT_POLICIES else len(WEIGHT_POLICIES),
        policy,
    )
    return (
        kind,
        len(tokens),
        view_key,
        policy_key,
        str(row.get("method")),
        _missing_first(row.get("gamma")),
        "" if is_missing(row.get("hp")) else str(row.get("hp")),
        _missing_first(row.get("seed")),
    )


def sort_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells in display order (see `cell_rank`); gamma sorts numerically, not inside the hp slug."""
    if cells.empty:
        return cells
    ranks = [cell_rank(row) for _, row in cells.iterrows()]
    order = sorted(range(len(cells)), key=ranks.__getitem__)
    return cells.iloc[order]


def section_cells(cells: pd.DataFrame, dataset: str, pair: str) -> pd.DataFrame:
    """The sorted cells of one (dataset, pair)."""
    mask = (cells["dataset"] == dataset) & (cells["pair"] == pair)
    return sort_cells(cells[mask]).reset_index(drop=True)


def dataset_order(cells: pd.DataFrame) -> tuple[list[str], dict[str, list[str]]]:
    """Datasets ordered by group (GROUP_ORDER first, then by name; ungrouped last) then by name,
    and the datasets of each group, in that order."""
    groups: dict[str, list[str]] = {}
    ungrouped = []
    for dataset, of_dataset in cells.groupby("dataset", sort=True):
        named = of_dataset["group"].dropna()
        if named.empty:
            ungrouped.append(dataset)
        else:
            groups.setdefault(str(named.mode().iloc[0]), []).append(dataset)
    ranked = sorted(
        groups, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g)
    )
    groups = {g: groups[g] for g in ranked}
    return [d for g in groups for d in groups[g]] + ungrouped, groups


# ---- page parts ------------------------------------------------------------------------------


def render_header(
    cells: pd.DataFrame,
    generated: datetime,
    keys: list[tuple[str, str]],
    with_weights: bool = False,
    extra_toc: list[tuple[str, str]] | None = None,
) -> str:
    """Title, provenance, a table of contents and an alert when any greedy cell is not lossless.

    `extra_toc` lists (anchor, title) of the optional sections between block efficiency and the
    weights."""
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
    toc += "<li><a href='#block-efficiency'>Block efficiency by dataset</a></li>"
    toc += "".join(f"<li><a href='#{a}'>{title}</a></li>" for a, title in extra_toc or [])
    if with_weights:
        toc += "<li><a href='#weights'>Ensemble weights over decoding</a></li>"
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
            bugs.append(
                f"{label_html(row['label'])} {esc(row['hp'])} seed {fmt_num(row['seed'], True)}"
            )
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
    if column == "label":
        return f"<td>{label_html(value)}</td>"
    if column in TEXT_COLUMNS:
        title = f" title='{esc(row['hparams'])}'" if column == "hp" else ""
        return f"<td{title}>{esc(value)}</td>"
    cls = "num bug-cell" if bug and column == "lossless_rate" else "num"
    return f"<td class='{cls}'>{fmt_num(value, integer=column in INT_COLUMNS)}</td>"


def hover_text(row: pd.Series) -> str:
    """Escaped hover label of a cell (plotly renders <br> but would also render data markup)."""
    return (
        f"{label_html(row['_name'])} ({esc(row['method'])})<br>hp: {esc(row['hp'])}"
        f"<br>seed: {fmt_num(row['seed'], True)}"
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
    """Tau vs gamma, one line per (method, label and views, acceptance), with AR at tau = 1."""
    drafted = cells.dropna(subset=["gamma", "tau"])
    drafted = drafted[~drafted["method"].map(is_ar)]
    if drafted.empty:
        return None
    fig = go.Figure()
    dash_of: dict[str, int] = {}
    groups = drafted.groupby(["method", "_name", "acceptance"], dropna=False, sort=True)
    for (method, name, acceptance), group in groups:
        # Seeds and hyperparameters other than gamma share a point: average them, show the count.
        per_gamma = group.groupby("gamma")["tau"].agg(["mean", "size"]).reset_index()
        dash = dash_of[method] = dash_of.get(method, -1) + 1
        name = f"{label_html(name)} · {esc(acceptance)}"
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


def figures_block(figures: list[go.Figure], notes: list[str]) -> str:
    """A grid of figures, after a note on what was left out (if anything)."""
    note = f"<p class='note'>{' '.join(notes)}</p>" if notes else ""
    figs = "".join(figure_html(fig) for fig in figures)
    return f"{note}<div class='figs'>{figs}</div>"


def figure_html(fig: go.Figure) -> str:
    """A figure as a div plus its JSON; plotly.js itself is already in the page head."""
    return pio.to_html(
        fig,
        include_plotlyjs=False,
        full_html=False,
        config=FIGURE_CONFIG,
        default_height=FIGURE_HEIGHT,
    )


# ---- block efficiency by dataset (TABED Table 1) ---------------------------------------------

BLOCK_EFFICIENCY_CAPTION = (
    "τ (tau, block efficiency) = tokens emitted per target verification step = mean(accepted + 1) "
    "pooled over all steps of a cell, then averaged over seeds. One table per pair and acceptance "
    "rule / temperature; one row per method (its label, plus the hp slug when a label was run with "
    "several hyperparameters); AR (τ = 1) is left out. <i>avg &lt;group&gt;</i> = unweighted mean "
    "of τ over the group's datasets of the table, shown only when the row has every one of them; "
    "<i>avg all</i> = the same over all the datasets of the table. In each column the best value "
    "is <b>bold</b> and the second best <u>underlined</u> (equal values at the displayed precision "
    "share the mark)."
)


def tau_by_dataset(cells: pd.DataFrame) -> pd.DataFrame:
    """Tau of each method row (mean over seeds) on each dataset, with the group and overall means.

    `cells` are those of one table (one pair and acceptance setting). The index holds the row
    names (display name, plus " · hp" when a display name has several hp values), in display
    order; the columns are pairs (kind, name): ("dataset", d) for each dataset, ("group", g) for
    each dataset group, then ("all", ""). A group or overall mean is NaN unless the row has a tau
    on every dataset it covers.
    """
    cells = with_labels(cells) if "_name" not in cells else cells
    drafted = cells[~cells.apply(is_ar_row, axis=1)] if len(cells) else cells
    drafted = drafted.assign(hp=drafted["hp"].fillna(""))
    datasets, groups = dataset_order(drafted)
    columns = [("dataset", d) for d in datasets] + [("group", g) for g in groups] + [("all", "")]
    ordered = sort_cells(drafted)
    keys = list(dict.fromkeys(zip(ordered["_name"], ordered["hp"], strict=True)))
    n_hp = Counter(name for name, _ in keys)
    means = drafted.groupby(["_name", "hp", "dataset"])["tau"].mean()
    rows = {}
    for name, hp in keys:
        per_dataset = {d: means.get((name, hp, d), math.nan) for d in datasets}
        values = [per_dataset[d] for d in datasets]
        for members in groups.values():
            values.append(mean_if_complete([per_dataset[d] for d in members]))
        values.append(mean_if_complete(list(per_dataset.values())))
        rows[f"{name} · {hp}" if n_hp[name] > 1 and hp else name] = values
    return pd.DataFrame.from_dict(
        rows, orient="index", columns=pd.MultiIndex.from_tuples(columns, names=["kind", "name"])
    )


def mean_if_complete(values: list[float]) -> float:
    """The mean of `values`, or NaN when any is missing (or there are none)."""
    if not values or any(is_missing(v) for v in values):
        return math.nan
    return sum(values) / len(values)


def rank_marks(values: list[float]) -> list[str]:
    """Per value: "best", "second" or "" — ranks by the displayed number, so visible ties share."""
    shown = [None if is_missing(v) else float(fmt_num(v)) for v in values]
    distinct = sorted({v for v in shown if v is not None}, reverse=True)
    marks = {v: mark for v, mark in zip(distinct, ("best", "second"), strict=False)}
    return [marks.get(v, "") if v is not None else "" for v in shown]


def block_efficiency_html(table: pd.DataFrame) -> str:
    """A `tau_by_dataset` frame as HTML: best per column in bold, second best underlined."""
    head = ["<th>method</th>"]
    for kind, name in table.columns:
        if kind == "dataset":
            head.append(f"<th>{esc(name)}</th>")
        elif kind == "group":
            head.append(f"<th>avg {esc(name)}</th>")
        else:
            head.append("<th>avg all</th>")
    marks = {column: rank_marks(list(table[column])) for column in table.columns}
    body = []
    for i, name in enumerate(table.index):
        tds = [f"<td>{label_html(name)}</td>"]
        for column in table.columns:
            text = fmt_num(table[column].iloc[i])
            mark = marks[column][i]
            if mark == "best":
                text = f"<b>{text}</b>"
            elif mark == "second":
                text = f"<u>{text}</u>"
            tds.append(f"<td class='num'>{text}</td>")
        body.append(f"<tr>{''.join(tds)}</tr>")
    table_html = (
        f"<table class='tau-table'><thead><tr>{''.join(head)}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    return f"<div class='scroll'>{table_html}</div>"


def render_block_efficiency(cells: pd.DataFrame) -> str:
    """TABED's Table 1 layout: tau per dataset and its group averages, per pair and setting."""
    parts = [
        "<h2 id='block-efficiency'>Block efficiency by dataset</h2>",
        f"<p class='caption'>{BLOCK_EFFICIENCY_CAPTION}</p>",
    ]
    drafted = cells[~cells.apply(is_ar_row, axis=1)] if len(cells) else cells
    if drafted.empty:
        return "\n".join([*parts, "<p class='note'>No speculative cells.</p>"])
    settings = drafted.groupby(["pair", "acceptance", "temperature"], dropna=False, sort=True)
    for (pair, acceptance, temperature), of_setting in settings:
        temp = MISSING if is_missing(temperature) else f"{float(temperature):g}"
        parts.append(f"<h3>{esc(pair)} · {esc(acceptance)} · temperature {temp}</h3>")
        parts.append(block_efficiency_html(tau_by_dataset(of_setting)))
    return "\n".join(parts)


# ---- per-step statistics of the blocks table -------------------------------------------------

# The tree policies of DESIGN.md, in the order their rows are listed side by side.
TREE_ORDER = ["chain", "static", "dynamic", "sage"]


def tree_kind(hparams: object) -> str:
    """The tree policy of a cell's hparams JSON ("chain" when unset, as in the registry)."""
    try:
        spec = json.loads(hparams) if isinstance(hparams, str) else {}
    except ValueError:
        return ""
    tree = spec.get("tree") if isinstance(spec, dict) else None
    return "chain" if tree is None else str(tree)


def cell_key(row: pd.Series) -> tuple:
    """The identity of a cell (CELL_KEY) in a form that compares equal across tables."""
    seed = row["seed"]
    return (*(str(row[c]) for c in CELL_KEY[:-1]), None if is_missing(seed) else int(seed))


def steps_by_cell(cells: pd.DataFrame, stats: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """Per drafting cell with steps: its rows of `stats` (see `load_step_stats`)."""
    if stats.empty or cells.empty:
        return {}
    known = {cell_key(row) for _, row in cells.iterrows()}
    found = {}
    for key, rows in stats.groupby(CELL_KEY, sort=False, dropna=False):
        if is_missing(key[-1]):
            continue
        key = (*(str(k) for k in key[:-1]), int(key[-1]))
        if key in known and not is_ar(key[2]) and rows["n_steps"].sum() > 0:
            found[key] = rows
    return found


def acceptance_curve(stats: pd.DataFrame) -> tuple[list[float], list[int]]:
    """Per draft position d = 1..max depth: the share of steps whose accepted path length is >= d
    among those whose proposal depth is >= d, and that number of steps (the denominator)."""
    depth = stats["depth"].astype(float).to_numpy()
    accepted = stats["accepted"].astype(float).to_numpy()
    n = stats["n_steps"].astype(float).to_numpy()
    top = int(depth.max()) if len(depth) and not math.isnan(depth.max()) else 0
    rates, reached = [], []
    for d in range(1, top + 1):
        deep = depth >= d
        total = n[deep].sum()
        rates.append(round(float(n[deep & (accepted >= d)].sum() / total), 4))
        reached.append(int(total))
    return rates, reached


def drafting_cells(cells: pd.DataFrame, steps: dict[tuple, pd.DataFrame]) -> pd.DataFrame:
    """The non-AR cells, with their tree policy (`tree`), their steps and drafted nodes in the
    blocks table (`_steps`, `_drafted`) and mean tree size (`tree_size`, NaN without steps)."""
    drafted = cells[~cells.apply(is_ar_row, axis=1)] if len(cells) else cells
    if drafted.empty:
        return drafted.assign(tree=[], tree_size=[], _key=[], _steps=[], _drafted=[])
    keys = [cell_key(row) for _, row in drafted.iterrows()]
    n_steps = [float(steps[k]["n_steps"].sum()) if k in steps else 0.0 for k in keys]
    n_drafted = [float(steps[k]["drafted_sum"].sum()) if k in steps else 0.0 for k in keys]
    return drafted.assign(
        hp=drafted["hp"].fillna(""),
        tree=drafted["hparams"].map(tree_kind),
        tree_size=[d / n if n else math.nan for d, n in zip(n_drafted, n_steps, strict=True)],
        _key=keys,
        _steps=n_steps,
        _drafted=n_drafted,
    )


def line_names(keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Escaped display names of (name, hp) rows: the hp is appended when a name has several."""
    n_hp = Counter(name for name, _ in keys)
    return {
        (name, hp): label_html(name) + (f" · {esc(hp)}" if n_hp[name] > 1 and hp else "")
        for name, hp in keys
    }


# ---- acceptance rate by draft position (SAGE / EAGLE) ----------------------------------------

ACCEPTANCE_TITLE = "Acceptance by draft position"
MAX_ACCEPTANCE_FIGURES = 8
MAX_ACCEPTANCE_LINES = 12


def acceptance_caption(pair: object) -> str:
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


def acceptance_lines(
    of_dataset: pd.DataFrame, steps: dict[tuple, pd.DataFrame]
) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(name, hp, method, pooled stats) per line of one dataset's figure, in plotting order:
    trees before chains, each in table order; seeds of one (name, hp) are pooled.

    Where a step has no recorded depth the stats hold its drafted count instead, which is its depth
    only for a chain; such steps of other trees are left out.
    """
    with_steps = of_dataset[of_dataset["_key"].map(steps.__contains__)]
    ordered = sort_cells(with_steps)
    ordered = ordered.iloc[(ordered["tree"] == "chain").to_numpy().argsort(kind="stable")]
    lines = []
    for (name, hp), group in ordered.groupby(["_name", "hp"], sort=False):
        pooled = pd.concat([steps[k] for k in group["_key"]])
        if group["tree"].iloc[0] != "chain":
            pooled = pooled[pooled["depth_recorded"].astype(bool)]
        if (pooled["n_steps"][pooled["depth"] >= 1] > 0).any():
            lines.append((name, hp, str(group["method"].iloc[0]), pooled))
    return lines


def acceptance_figure(
    dataset: str, lines: list[tuple[str, str, str, pd.DataFrame]], colors: dict[str, str]
) -> go.Figure:
    """One line per (name, hp): acceptance rate against draft position."""
    fig = go.Figure()
    names = line_names([(name, hp) for name, hp, _, _ in lines])
    dash_of: dict[str, int] = {}
    for name, hp, method, stats in lines:
        rates, reached = acceptance_curve(stats)
        dash = dash_of[method] = dash_of.get(method, -1) + 1
        shown = names[(name, hp)]
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(rates) + 1)),
                y=rates,
                mode="lines+markers",
                name=shown,
                line=dict(color=colors.get(method), dash=DASHES[dash % len(DASHES)]),
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


def render_acceptance_by_position(
    cells: pd.DataFrame, steps: dict[tuple, pd.DataFrame], colors: dict[str, str]
) -> str:
    """Per dataset of the first pair with steps: acceptance-rate-by-position curves; "" if none."""
    drafted = drafting_cells(cells, steps)
    drafted = drafted[drafted["_key"].map(steps.__contains__)] if len(drafted) else drafted
    # Lines per dataset of the first pair that has any, datasets in table order.
    pair, by_dataset = None, {}
    for pair in sorted(drafted["pair"].dropna().unique()) if len(drafted) else []:
        of_pair = drafted[drafted["pair"] == pair]
        datasets, _ = dataset_order(of_pair)
        by_dataset = {
            d: acceptance_lines(of_pair[of_pair["dataset"] == d], steps) for d in datasets
        }
        by_dataset = {d: lines for d, lines in by_dataset.items() if lines}
        if by_dataset:
            break
    if not by_dataset:
        return ""
    datasets = list(by_dataset)
    figures, lines_left_out = [], 0
    for dataset in datasets[:MAX_ACCEPTANCE_FIGURES]:
        lines = by_dataset[dataset]
        lines_left_out += max(0, len(lines) - MAX_ACCEPTANCE_LINES)
        figures.append(acceptance_figure(dataset, lines[:MAX_ACCEPTANCE_LINES], colors))
    notes = []
    if len(datasets) > MAX_ACCEPTANCE_FIGURES:
        notes.append(
            f"{len(datasets) - MAX_ACCEPTANCE_FIGURES} more dataset(s) not plotted, to keep the "
            "page small."
        )
    if lines_left_out:
        notes.append(f"{lines_left_out} more line(s) not plotted, to keep the figures readable.")
    return (
        f"<h2 id='acceptance-position'>{ACCEPTANCE_TITLE}</h2>\n"
        f"<p class='caption'>{acceptance_caption(pair)}</p>\n{figures_block(figures, notes)}"
    )


# ---- tree methods side by side (SAGE Table 1) ------------------------------------------------

TREE_TITLE = "Tree methods side by side"
# (column, header) of each dataset's group of columns; tau and speedup get the best marks.
TREE_METRICS = [
    ("tau", "τ"),
    ("tokens_per_s", "tokens/s"),
    ("speedup", "speedup"),
    ("tree_size", "tree size"),
    ("draft_visual_share", "visual seen"),
]
TREE_MARKED = {"tau", "speedup"}
TREE_CAPTION = (
    "One table per pair; one row per drafting method and hp (tree policy: chain, static, dynamic "
    "or sage, from the cell's hparams), ordered by tree policy. Per dataset: τ = mean(accepted + "
    "1) per step, tokens/s = emitted tokens / decode time, speedup = AR decode time / method "
    "decode time (each averaged over seeds), and tree size = mean proposal nodes per step "
    "(<code>drafted</code>: gamma for a chain, the tree's node count for a token tree), pooled "
    "over the steps of all seeds in the blocks table; visual seen = the draft's share of the "
    "target's visual tokens (draft_visual_share). The best τ and the best speedup of each "
    "dataset are <b>bold</b> (equal values at the displayed precision share the mark). The "
    "figure: τ against mean tree size, one point per cell (dataset, hp, seed), one trace per "
    "method."
)


def tree_table(of_pair: pd.DataFrame, datasets: list[str]) -> pd.DataFrame:
    """One row per (name, hp) of a pair's drafting cells, by tree policy then table order.

    Columns ("", "name"), ("", "hp"), ("", "tree"), then (dataset, metric) per dataset and metric
    of TREE_METRICS: the tree size pooled over steps, the others averaged over seeds.
    """
    ordered = sort_cells(of_pair)
    rank = ordered["tree"].map(
        lambda t: TREE_ORDER.index(t) if t in TREE_ORDER else len(TREE_ORDER)
    )
    ordered = ordered.iloc[rank.to_numpy().argsort(kind="stable")]
    rows = []
    for (name, hp), group in ordered.groupby(["_name", "hp"], sort=False):
        row = {
            ("", "name"): name,
            ("", "hp"): hp,
            ("", "tree"): group["tree"].iloc[0],
        }
        for dataset in datasets:
            of_dataset = group[group["dataset"] == dataset]
            for column, _ in TREE_METRICS:
                if column != "tree_size":
                    row[(dataset, column)] = of_dataset[column].astype(float).mean()
            n_steps = of_dataset["_steps"].sum()
            row[(dataset, "tree_size")] = (
                of_dataset["_drafted"].sum() / n_steps if n_steps else math.nan
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=pd.MultiIndex.from_tuples(list(rows[0]) if rows else []))


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
    """Tau against mean tree size, one point per cell, one trace per method label."""
    points = of_pair.dropna(subset=["tau", "tree_size"])
    if points.empty:
        return None
    palette = qualitative.Plotly + qualitative.D3 + qualitative.Dark24
    fig = go.Figure()
    for i, (name, group) in enumerate(points.groupby("_name", sort=False)):
        shown = label_html(name)
        fig.add_trace(
            go.Scatter(
                x=[round(float(x), 4) for x in group["tree_size"]],
                y=group["tau"].astype(float).tolist(),
                mode="markers",
                name=shown,
                marker=dict(color=palette[i % len(palette)], size=9),
                text=[
                    f"{shown} ({esc(row['tree'])})<br>dataset: {esc(row['dataset'])}"
                    f"<br>hp: {esc(row['hp'])}<br>seed: {fmt_num(row['seed'], True)}"
                    for _, row in group.iterrows()
                ],
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


def render_tree_methods(cells: pd.DataFrame, steps: dict[tuple, pd.DataFrame]) -> str:
    """SAGE's Table 1 layout per pair, and tau against mean tree size; "" without steps."""
    drafted = drafting_cells(cells, steps)
    if drafted.empty or drafted["tree_size"].isna().all():
        return ""
    parts = [f"<h2 id='tree-methods'>{TREE_TITLE}</h2>", f"<p class='caption'>{TREE_CAPTION}</p>"]
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


# ---- ensemble weights over decoding (TABED Figure 3) -----------------------------------------


# Which weight policies' figures come first when not every eligible cell is plotted.
POLICY_PLOT_ORDER = {"grid": 0, "softmax": 1, "kld": 2, "tvd": 3, "adaboost": 4, "random": 5}


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


def weight_share(weights: object, m: int, t: int, n_views: int) -> float | None:
    """w(M) / (w(M) + w(T)) of one step, rounded to 4 decimals; None when undefined."""
    if weights is None or is_missing(weights) or len(weights) != n_views:
        return None
    wm, wt = float(weights[m]), float(weights[t])
    if not wm + wt > 0:
        return None
    return round(wm / (wm + wt), 4)


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
        position = [int(p) for p in one["position"]]
        accepted = [int(a) for a in one["accepted"]]
        drafted = [int(d) for d in one["drafted"]]
        share = [weight_share(w, m, t, len(tokens)) for w in one["weights"]]
        width = [a + 1 for a in accepted]
        for full, color, name in (
            (True, ACCEPTED_COLOR, "block: all drafted tokens accepted"),
            (False, REJECTED_COLOR, "block: a drafted token rejected"),
        ):
            idx = [k for k in range(len(position)) if (accepted[k] == drafted[k]) == full]
            if not idx:
                continue
            fig.add_trace(
                go.Bar(
                    x=[position[k] for k in idx],
                    y=[1] * len(idx),
                    width=[width[k] for k in idx],
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
        # The last step holds until its block ends, so repeat its share there.
        end = position[-1] + width[-1]
        fig.add_trace(
            go.Scatter(
                x=[*position, end],
                y=[*share, share[-1]],
                mode="lines",
                line=dict(shape="hv", color="black", width=1.5),
                name="w(M) / (w(M) + w(T))",
                legendgroup="share",
                showlegend=row == 1,
                customdata=[[a, d] for a, d in zip(accepted, drafted, strict=True)]
                + [[accepted[-1], drafted[-1]]],
                hovertemplate="position %{x} · M share %{y:.3f}"
                "<br>accepted %{customdata[0]} of %{customdata[1]} drafted<extra></extra>",
            ),
            row=row,
            col=1,
        )
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


def weights_caption(pair: object) -> str:
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


def render_weights(cells: pd.DataFrame, blocks: pd.DataFrame) -> str:
    """TABED's Figure 3: the ensemble weights over decoding, for a few cells and sample-turns."""
    heading = "<h2 id='weights'>Ensemble weights over decoding</h2>"
    targets = weight_plot_cells(cells if "_name" in cells else with_labels(cells))
    if targets.empty:
        return (
            f"{heading}\n<p class='note'>No cell has an ensemble with both M and T views and a "
            "non-static weight policy.</p>"
        )
    by_cell = {
        (str(d), str(p), str(m), str(h), int(s)): steps
        for (d, p, m, h, s), steps in blocks.groupby(CELL_KEY, sort=False)
    }
    figures, without_blocks, left_out = [], 0, 0
    for _, cell in targets.iterrows():
        key = tuple(str(cell[c]) for c in CELL_KEY[:-1]) + (int(cell["seed"]),)
        steps = by_cell.get(key)
        fig = weights_figure(cell, steps) if steps is not None else None
        if fig is None:
            without_blocks += 1
        elif len(figures) >= MAX_WEIGHT_FIGURES:
            left_out += 1
        else:
            figures.append(fig)
    notes = []
    if left_out:
        notes.append(f"{left_out} more cell(s) not plotted, to keep the page small.")
    if without_blocks:
        notes.append(f"{without_blocks} cell(s) have no rows in the blocks table.")
    return (
        f"{heading}\n<p class='caption'>{weights_caption(targets['pair'].iloc[0])}</p>\n"
        f"{figures_block(figures, notes)}"
    )


# ---- cross-dataset summary -------------------------------------------------------------------


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
    cells = cells.assign(hp=cells["hp"].fillna(""))
    datasets = sorted(cells["dataset"].unique())
    rows_order = sort_cells(cells).drop_duplicates(["_name", "hp"])[["_name", "hp"]]
    means = cells.groupby(["_name", "hp", "dataset"])[metric].mean()
    head = "<th>method</th><th>hp</th>" + "".join(f"<th>{esc(d)}</th>" for d in datasets)
    body = []
    for name, hp in rows_order.itertuples(index=False):
        values = "".join(
            f"<td class='num'>{fmt_num(means.get((name, hp, d)))}</td>" for d in datasets
        )
        body.append(f"<tr><td>{label_html(name)}</td><td>{esc(hp)}</td>{values}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
