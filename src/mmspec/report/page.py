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
from mmspec.report.blocks import load_step_stats, step_stats_by_cell
from mmspec.report.cells import lossless_bug, with_labels
from mmspec.report.figures import method_colors
from mmspec.report.formatting import MISSING, esc, heading
from mmspec.report.pooled import INTERVAL_METRICS, pool_seeds
from mmspec.scoring.lossless import TIE_ULPS
from mmspec.tables import CELLS, CLAIMS, read_table

DEFINITIONS_ANCHOR = "definitions"
METRIC_DEFINITIONS = [
    (
        "seeds pooled",
        "every table row, plotted point and summary value is one (dataset, pair, method, hp) "
        "with its seeds pooled: the counts n_samples, steps, new_tokens, judge_failures and the "
        "divergence counts are summed over the seeds, every other number is the mean of the "
        "seeds' values. The seeds column counts them; a row's ▸ button shows each seed's own "
        "cell under it.",
    ),
    (
        "interval over seeds",
        f"of a mean over n ≥ 2 seeds ({', '.join(INTERVAL_METRICS)}): the 95% Student t "
        "interval mean ± t(0.975, n − 1) · s / √n, s the seeds' standard deviation; shown as "
        "speedup_low / _high and the retentions' _low / _high, and for tau and quality in the "
        "value's tooltip and the frontier's brackets. With few seeds it is wide (t = 12.7 for "
        "two seeds, 4.3 for three): it bounds where the sweep's mean lies, not a single run.",
    ),
    ("step", "one target verification forward."),
    ("accepted", "draft tokens accepted at a step, not counting the bonus/correction token."),
    (
        "steps",
        "the steps of a cell, summed over its sample-turns (AR: one per token but the first).",
    ),
    (
        "new_tokens",
        "tokens the steps emitted: every output token but the first (which the prefill emits), "
        "after a stop token or max_new_tokens cut the last step.",
    ),
    (
        "tau",
        "new_tokens / steps, pooled over the cell: a token accepted on the last step but cut by a "
        "stop token or max_new_tokens is not counted (tau_per_sample: the same per sample-turn, "
        "then averaged).",
    ),
    (
        "tau_turn1, tau_turn2",
        "tau of the cell's first turns alone (every single-turn sample is one) and of its second "
        "turns alone (multi-turn dialogues, TABED's second-turn rows), pooled the same way, each "
        "with its 95% bootstrap interval over those sample-turns (_low, _high); empty where the "
        "cell has no such turn.",
    ),
    (
        "accepted_mean",
        "emitted draft tokens / steps, pooled over the cell (tau without the bonus/correction "
        "token).",
    ),
    (
        "speedup",
        "AR decode time per emitted token / method decode time per emitted token, greedy and "
        "sampling alike, both as on the cell's own job (prefill excluded, reported separately). "
        "AR is decoded once per (dataset, pair, seed, temperature), by the AR cell; the method's "
        "job runs a "
        "short AR probe (AR's first <code>timing.ar_probe_tokens</code> steps) back to back "
        "with each sample-turn, and AR's time is the AR cell's time of every sample-turn scaled "
        "by ar_speed_ratio, so that a job on a slower node or under more load is compared with "
        "AR as it runs there (<code>timing.ar_reference: full</code> decodes AR in full beside "
        "every sample-turn instead).",
    ),
    (
        "ar_speed_ratio",
        "the probes' step time in the cell's own job / the AR cell's time of the same steps, "
        "pooled over the sample-turns: how much slower (above 1) or faster the job's device and "
        "load ran AR than the AR cell's (1 for the AR cell itself).",
    ),
    (
        "tau_low, tau_high",
        "tau's 95% interval: over the seeds where a row pools several; of a single cell, the "
        "percentile bootstrap interval of the pooled tau, resampling the cell's sample-turns.",
    ),
    (
        "speedup_low, speedup_high",
        "the speedup's 95% interval: over the seeds (see interval over seeds) where a row pools "
        "several; of a single cell (a seed's row, or a row of one seed), the percentile bootstrap "
        "interval resampling the cell's sample-turns, each with its probe, the AR cell's times of "
        "it and the method's (so the probes' noise is in the interval). A speedup in "
        "grey has an interval that contains 1: it is within noise of AR. Two rows differ beyond "
        "noise where their intervals are disjoint.",
    ),
    (
        "speedup_eq1",
        "tau / (k * c + 1) with c = T_q / T_p measured in the same job and k the draft forwards "
        "per step (gamma for a chain; TABED eq. 1), which assumes a verification costs one AR "
        "step; on a GPU it about does, on a CPU verifying several tokens costs more (see "
        "verify_cost).",
    ),
    (
        "speedup_eq1_verify",
        "tau / (k * c + v): Eq. 1 with the verification's measured cost v (verify_cost) in "
        "place of 1. Its gap to measured speedup is what a step spends beyond its draft forwards "
        "and its verification: the drafting loop's own overhead.",
    ),
    (
        "latency_ratio",
        "c = T_q / T_p: the mean time of one draft forward over the mean time of one AR target "
        "step, both on the cell's own job: T_q measured there, T_p the AR cell's mean step "
        "scaled by ar_speed_ratio (the c of speedup_eq1).",
    ),
    (
        "verify_cost",
        "v: the mean time of a verification step (the target's forward over the proposal, the "
        "acceptance rule, the cache commit) over the mean time of one AR step (T_p, as for "
        "latency_ratio), both on the cell's own job (AR: 1 within timing noise).",
    ),
    (
        "lossless_rate",
        "share of sample-turns whose greedy output equals the AR cell's token for token "
        "(empty for sampling cells); on a lossy rule it is shown in grey: divergence is "
        "expected, see retention. On a rule that preserves the target distribution "
        "(<code>lossless_rule</code>) each difference is checked in the cell's own job, on its "
        "device: see real_divergences.",
    ),
    (
        "near_tie_divergences, real_divergences, device_differences",
        "where a greedy lossless cell's sample-turns differ from the AR cell's, the target on "
        "the job's own device, fed each such output one token at a time as AR decodes, is "
        "checked at every position: each position where its argmax is not the output's token is "
        "a divergence (the counts are of positions, summed over the cell's sample-turns; the "
        "positions and margins are in the cell's samples.parquet), a near-tie "
        "when AR's margin between the two tokens is within a few units in the last place of "
        f"the dtype ({', '.join(f'{u:g} in {d}' for d, u in TIE_ULPS.items())}: a verification "
        "over several tokens rounds differently from AR's one-token forward), real beyond it. Real "
        "divergences are a bug, in red; near-ties are not failures. device_differences counts "
        "the sample-turns that differ from the AR cell's output but not from what the target "
        "emits on the job's own device (the AR cell ran on another device).",
    ),
    (
        "sample-turn",
        "one turn of one sample: a row of the prepared dataset (a single-turn sample has one).",
    ),
    (
        "first_divergence_mean",
        "mean over the sample-turns that differ from AR of the first output position where they "
        "differ (empty when none differ or for sampling cells).",
    ),
    (
        "quality",
        "the dataset's task metric (image generation: CLIP score), named in the column "
        "<code>metric</code> and in each frontier's heading.",
    ),
    ("retention", "quality / AR quality."),
    (
        "retention_low, retention_high",
        "the retention's 95% interval: over the seeds where a row pools several; of a single "
        "cell, the percentile bootstrap interval resampling the cell's sample-turns each with "
        "its AR answer's quality (so what a sample's difficulty shares with AR cancels). Two "
        "rows whose intervals overlap are within noise of each other; a greedy lossless cell's "
        "is [1, 1].",
    ),
    (
        "fid, fid_retention",
        "image generation: FID of the cell's images against the dataset's reference images "
        "(lower is better), and AR FID / FID; fid_low / _high and fid_retention_low / _high: "
        "their 95% intervals, the percentile bootstrap resampling the prompts (each with its "
        "reference image, the cell's image and AR's, so what a prompt shares with AR cancels), "
        "shifted by the bootstrap's bias: a resample repeats images, which raises its FID, so "
        "with a few dozen images the plain percentiles can lie wholly above the point.",
    ),
    (
        "relaxed_share",
        "loose verification: the share of the accepted draft tokens that the rule accepted "
        "although the target would have emitted another token (0 for exact rules).",
    ),
    (
        "judge_score, judge_retention, judge_failures",
        "judged datasets: the LLM judge's mean 0-5 score of the cell's answers, its ratio to the "
        "AR cell's mean on the same sample-turns (both over the sample-turns whose two "
        "judgements succeeded), and the cell's judgements that failed after retries (stored "
        "as null with their error, never scored); judge_retention_low / _high: its interval, as "
        "retention's.",
    ),
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
) -> None:
    """Render the cells table at `cells_path` as one self-contained HTML page at `out_html`.

    With `blocks_path` (results/summary/blocks.parquet) the page also shows the acceptance rate by
    draft position, the tree methods side by side and the ensemble weights over decoding; without
    it those sections are left out. `head_folders` (trained drafter heads) adds their training;
    `claims_path` (results/summary/claims.parquet) the reproduction scorecard, first.
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
) -> str:
    """The full HTML page for a cells frame (one row per cell, CELLS columns).

    `blocks` (BLOCKS columns, possibly only some of its rows) adds the ensemble-weight plots;
    `step_stats` (from `load_step_stats`, over all the rows) the acceptance rate by draft position
    and the tree methods side by side, each shown only when some cell has steps for it.
    """
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
        *dataset_sections(cells, pooled, keys, colors),
        (loose.ANCHOR, loose.TITLE, loose.render(pooled)),
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
    cells: pd.DataFrame, pooled: pd.DataFrame, keys: list[tuple], colors: dict[str, str]
) -> list[tuple[str, str, str]]:
    """(anchor, title, html) of the section of each (dataset, pair) of `keys`: its method table
    (rows seeds-pooled) and tau vs gamma."""
    sections = []
    for i, (dataset, pair) in enumerate(keys):
        anchor, title = f"sec-{i}", f"{esc(dataset)} · {esc(pair)}"
        of_cells = cells[(cells["dataset"] == dataset) & (cells["pair"] == pair)]
        of_pooled = pooled[(pooled["dataset"] == dataset) & (pooled["pair"] == pair)]
        html = f"{methods_table.render(of_cells, of_pooled)}\n{tau_gamma.render(of_cells, colors)}"
        sections.append((anchor, title, f"{heading(anchor, title)}\n{html}"))
    return sections
