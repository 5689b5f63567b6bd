"""One self-contained HTML page summarising a sweep, built from results/summary/cells.parquet.

Optionally also from results/summary/blocks.parquet (one row per verification step), for the
acceptance rate by draft position, the tree methods side by side (mean tree size per step) and the
plots of the ensemble weights over decoding.

The page opens offline from disk: plotly.js is inlined once in the head (with the script that
draws the data tables), figures and table rows are embedded as JSON (not images), and there is no
external CSS. Every string that comes from the data is HTML-escaped, including those that plotly
renders (hover text and legend names), because plotly interprets a subset of HTML in them; in the
data tables' JSON, '<', '>' and '&' are escaped and the browser sets the strings as text.

A sweep repeats its cells over seeds, so every table row, point and summary value is one
(dataset, pair, method, hp) with its seeds pooled (`pooled`); a pooled row's seeds are one click
away in its method table. So the page grows with the methods and hyperparameters swept, not with
the seeds, and its tables are drawn a page at a time.

The page, top to bottom: a header with the table of contents, the Pareto frontiers (speedup vs
quality per (dataset, pair)), the cross-dataset summary, the metric definitions, one section per
(dataset, pair) (its method table and tau vs gamma), then the sections of the modules below,
each in its own module: loose verification, image generation (FID vs tau, thumbnails), block
efficiency by dataset, acceptance by draft position, tree methods side by side, ensemble weights
over decoding, trained drafters.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from plotly.offline import get_plotlyjs

from mmspec.decoding import catalog
from mmspec.report import (
    acceptance,
    block_efficiency,
    datatable,
    image_generation,
    loose,
    methods_table,
    pareto,
    reproduction,
    summary,
    tau_gamma,
    trees,
    weights,
)
from mmspec.report import heads as heads_section
from mmspec.report import searches as search_section
from mmspec.report.blocks import load_step_stats, step_stats_by_cell
from mmspec.report.cells import lossless_bug, with_labels
from mmspec.report.figures import method_colors
from mmspec.report.formatting import MISSING, dataset_note, esc, heading
from mmspec.report.pooled import INTERVAL_METRICS, SUMMED, pool_seeds
from mmspec.storage.tables import CLAIMS, read_table
from mmspec.sweep import cell_metrics
from mmspec.sweep.cell_metrics import CELLS

DEFINITIONS_ANCHOR = "definitions"
# (term, HTML): the report's own words, the cells metrics' definitions (cell_metrics), views
METRIC_DEFINITIONS = [
    (
        "seeds pooled",
        "every table row, plotted point and summary value is one (dataset, pair, method, hp) "
        f"with its seeds pooled: the counts {', '.join(SUMMED)} are summed over the seeds, every "
        "other number is the mean of the seeds' values. The seeds column counts them; a row's ▸ "
        "button shows each seed's own cell under it.",
    ),
    (
        "interval over seeds",
        f"of a mean over n ≥ 2 seeds ({', '.join(INTERVAL_METRICS)}): the 95% Student t "
        "interval mean ± t(0.975, n − 1) · s / √n, s the seeds' standard deviation; shown as "
        "speedup_low / _high and the retentions' _low / _high, and for tau and quality in the "
        "value's tooltip and the frontier's brackets. With few seeds it is wide (t = 12.7 for "
        "two seeds, 4.3 for three): it bounds where the sweep's mean lies, not a single run.",
    ),
    *cell_metrics.glossary(),
    (
        "views",
        "what the drafter sees, one letter per view: "
        + ", ".join(f"{name} {v.description}" for name, v in catalog.components("view").items())
        + ". Several letters: an ensemble drafter whose per-view weights follow the "
        "<code>weights</code> policy.",
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
/* a lossy acceptance rule diverges from AR by design: neutral, not an alert */
td.lossy-cell { color: #777; font-style: italic; }
td.noise-cell { color: #777; }
.alert { color: #b00; font-weight: bold; }
/* auto-fill, not auto-fit: each figure is drawn while the page is still parsing, so its column
   must already have its final width when later figures of the row do not exist yet. */
.figs { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 1rem; }
.figs > * { min-width: 0; }
.note { color: #666; font-style: italic; }
td.thumbs img { image-rendering: pixelated; margin-right: 3px; vertical-align: middle; }
input.filter { margin: 0.5rem 0 0; font-size: 0.85rem; width: 16rem; }
.data-table th { cursor: pointer; user-select: none; }
.data-table th[aria-sort=ascending]::after { content: " ▲"; }
.data-table th[aria-sort=descending]::after { content: " ▼"; }
.pager { font-size: 0.85rem; color: #555; margin: 0.2rem 0 0.6rem; }
.pager button { font-size: 0.8rem; }
button.expand { border: none; background: none; cursor: pointer; padding: 0 0.3rem 0 0; }
tr.sub-row td { background: #f5f5fa; color: #444; }
"""


def write_report(
    cells_path: str | Path,
    out_html: str | Path,
    blocks_path: str | Path | None = None,
    head_folders: list[str | Path] | None = None,
    claims_path: str | Path | None = None,
    searches: list | None = None,
    notes: dict[str, str] | None = None,
) -> None:
    """Render the cells table at `cells_path` as one self-contained HTML page at `out_html`.

    With `blocks_path` (results/summary/blocks.parquet) the page also shows the acceptance rate by
    draft position, the tree methods side by side and the ensemble weights over decoding; without
    it those sections are left out. `head_folders` (trained drafter heads) adds their training;
    `claims_path` (results/summary/claims.parquet) the reproduction scorecard, first;
    `searches` (`report.searches.load`) the searched methods' rounds; `notes` (dataset ->
    its config entry's `note`) what a reader of a dataset's results should know.
    """
    cells = read_table(cells_path, CELLS).to_pandas()
    blocks = step_stats = None
    if blocks_path is not None:
        blocks = weights.load_blocks(blocks_path, cells)
        step_stats = load_step_stats(blocks_path)
    page = render_page(
        cells,
        generated=datetime.now(UTC),
        blocks=blocks,
        step_stats=step_stats,
        heads=heads_section.load_heads(head_folders or []),
        claims=read_table(claims_path, CLAIMS).to_pandas() if claims_path else None,
        searches=searches,
        notes=notes,
    )
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so an interrupted run never leaves a truncated report behind.
    tmp = out_html.with_name(f".{out_html.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out_html)


def render_page(
    cells: pd.DataFrame,
    generated: datetime,
    blocks: pd.DataFrame | None = None,
    step_stats: pd.DataFrame | None = None,
    heads: list[dict] | None = None,
    claims: pd.DataFrame | None = None,
    searches: list | None = None,
    notes: dict[str, str] | None = None,
) -> str:
    """The full HTML page for a cells frame (one row per cell, CELLS columns).

    `blocks` (BLOCKS columns, possibly only some of its rows) adds the ensemble-weight plots;
    `step_stats` (from `load_step_stats`, over all the rows) the acceptance rate by draft position
    and the tree methods side by side, each shown only when some cell has steps for it; `notes`
    (dataset -> text) a note under each of the dataset's headings.
    """
    notes = notes or {}
    cells = with_labels(cells)
    pooled = pool_seeds(cells)
    colors = method_colors(cells)
    keys = sorted(cells.groupby(["dataset", "pair"]).groups) if len(cells) else []
    stats_by_cell = step_stats_by_cell(cells, step_stats) if step_stats is not None else {}
    weights_html = weights.render(cells, blocks) if blocks is not None else ""
    # (anchor, title, html) of each section in page order; "" for a section left out.
    sections = [
        (pareto.ANCHOR, pareto.TITLE, pareto.render(pooled, keys, colors) if keys else ""),
        (summary.ANCHOR, summary.TITLE, summary.render(pooled)),
        (DEFINITIONS_ANCHOR, "Metric definitions", render_definitions()),
        *dataset_sections(cells, pooled, keys, colors, notes),
        (loose.ANCHOR, loose.TITLE, loose.render(pooled, notes)),
        (
            search_section.ANCHOR,
            search_section.TITLE,
            search_section.render(pooled, searches or []),
        ),
        (image_generation.ANCHOR, image_generation.TITLE, image_generation.render(pooled, colors)),
        (block_efficiency.ANCHOR, block_efficiency.TITLE, block_efficiency.render(cells)),
        (acceptance.ANCHOR, acceptance.TITLE, acceptance.render(cells, stats_by_cell, colors)),
        (trees.ANCHOR, trees.TITLE, trees.render(cells, stats_by_cell)),
        (weights.ANCHOR, weights.TITLE, weights_html),
        (heads_section.ANCHOR, heads_section.TITLE, heads_section.render(cells, heads or [])),
    ]
    present = {anchor for anchor, _, html in sections if html}
    present |= {"sec-" + str(i) for i in range(len(keys))}
    sections.insert(
        0, (reproduction.ANCHOR, reproduction.TITLE, reproduction.render(claims, present))
    )
    toc = [(anchor, title) for anchor, title, html in sections if html]
    body = "\n".join(
        [render_header(cells, pooled, generated, toc), *(html for _, _, html in sections)]
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<title>mmspec report</title>\n"
        f"<style>{CSS}{reproduction.CSS}</style>\n"
        # Inlined once here, so every figure below embeds with include_plotlyjs=False.
        f"<script type='text/javascript'>{get_plotlyjs()}</script>\n"
        f"<script type='text/javascript'>{datatable.TABLE_JS}</script>\n"
        f"</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def render_header(
    cells: pd.DataFrame, pooled: pd.DataFrame, generated: datetime, toc: list[tuple[str, str]]
) -> str:
    """Title, provenance, the table of contents ((anchor, title) per section) and an alert when
    any greedy cell is not lossless."""
    devices = sorted(cells["device"].dropna().unique()) if len(cells) else []
    n_bugs = sum(map(lossless_bug, cells.to_dict("records")))
    alert = (
        f"<p class='alert'>⚠ {n_bugs} greedy cell(s) of a lossless rule with real divergences "
        "from AR (highlighted in red below): greedy speculative decoding must reproduce AR "
        "exactly, up to rounding near-ties.</p>"
        if n_bugs
        else ""
    )
    links = "".join(f"<li><a href='#{anchor}'>{title}</a></li>" for anchor, title in toc)
    return (
        "<h1>mmspec report</h1>\n"
        f"<p class='meta'>Generated {generated.strftime('%Y-%m-%d %H:%M:%S %Z')} · "
        f"{len(cells)} cells · {len(pooled)} rows with their seeds pooled · "
        f"devices: {', '.join(esc(d) for d in devices) or MISSING}</p>\n"
        f"{alert}\n"
        f"<ul>{links}</ul>"
    )


def render_definitions() -> str:
    """The metric glossary, so the numbers above and below are read the same way by everyone."""
    items = "".join(f"<dt>{term}</dt><dd>{text}</dd>" for term, text in METRIC_DEFINITIONS)
    return f"{heading(DEFINITIONS_ANCHOR, 'Metric definitions')}\n<dl class='defs'>{items}</dl>"


def dataset_sections(
    cells: pd.DataFrame,
    pooled: pd.DataFrame,
    keys: list[tuple],
    colors: dict[str, str],
    notes: dict[str, str],
) -> list[tuple[str, str, str]]:
    """(anchor, title, html) of the section of each (dataset, pair) of `keys`: the dataset's
    note, its method table (rows seeds-pooled) and tau vs gamma."""
    sections = []
    for i, (dataset, pair) in enumerate(keys):
        anchor, title = f"sec-{i}", f"{esc(dataset)} · {esc(pair)}"
        of_cells = cells[(cells["dataset"] == dataset) & (cells["pair"] == pair)]
        of_pooled = pooled[(pooled["dataset"] == dataset) & (pooled["pair"] == pair)]
        html = f"{methods_table.render(of_cells, of_pooled)}\n{tau_gamma.render(of_cells, colors)}"
        head = "\n".join(filter(None, [heading(anchor, title), dataset_note(notes, dataset)]))
        sections.append((anchor, title, f"{head}\n{html}"))
    return sections
