"""Tests of the HTML report: the Pareto helper, and pages built from synthetic cells and blocks."""

from __future__ import annotations

import json
import math
import re
from html import unescape as html_unescape
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from plotly.offline import get_plotlyjs

import mmspec.report.acceptance as report_acceptance
import mmspec.report.blocks as report_blocks
import mmspec.report.loose as report_loose
import mmspec.report.pooled as pooled
import mmspec.report.weights as report_weights
from mmspec import cli
from mmspec import config as mmconfig
from mmspec.report import datatable
from mmspec.report.block_efficiency import tau_by_dataset
from mmspec.report.cells import with_labels
from mmspec.report.formatting import esc, fmt_num
from mmspec.report.page import write_report
from mmspec.report.pareto import pareto_front
from mmspec.tables import BLOCKS, CELLS, HEAD_CURVES, write_table

ROOT = Path(__file__).resolve().parents[1]
PAIR = "llava-7b/llava-160m"
HOSTILE = "<script>alert(1)</script>"


def cell(**overrides) -> dict:
    """One CELLS row with plausible defaults, so each test states only what it is about."""
    row = {name: None for name in CELLS.names}
    row.update(
        dataset="chartqa",
        pair=PAIR,
        method="sps",
        hp="g4",
        hparams=json.dumps({"gamma": 4}),
        seed=0,
        label="SPS",
        group="benchmark",
        views="M",
        weights="static",
        gamma=4,
        tree="chain",
        acceptance="greedy",
        lossless_rule=True,
        temperature=0.0,
        n_samples=20,
        steps=400,
        new_tokens=1000,
        tau=2.5,
        tau_per_sample=2.4,
        accepted_mean=1.5,
        speedup=1.6,
        speedup_eq1=1.9,
        latency_ratio=0.08,
        lossless_rate=1.0,
        quality=0.7,
        ar_quality=0.7,
        retention=1.0,
        tokens_per_s=55.0,
        ar_tokens_per_s=34.0,
        prefill_s=0.12,
        draft_visual_tokens=576.0,
        draft_visual_share=1.0,
        caption_s=0.0,
        device="NVIDIA H100",
    )
    row.update(overrides)
    return row


def ar_cell(**overrides) -> dict:
    """The autoregressive baseline of a (dataset, pair)."""
    base = dict(
        method="ar",
        hp="default",
        hparams="{}",
        label="ar",
        views=None,
        weights=None,
        gamma=None,
        tree=None,
        new_tokens=400,
        tau=1.0,
        accepted_mean=0.0,
        speedup=1.0,
        speedup_eq1=None,
        latency_ratio=None,
    )
    return cell(**{**base, **overrides})


CELL_ROWS = [
    ar_cell(),
    cell(hp="g2", gamma=2, tau=2.0, speedup=1.4, quality=0.7),
    cell(hp="g4", gamma=4, tau=2.6, speedup=1.7, quality=0.7),
    cell(hp="g6", gamma=6, tau=2.9, speedup=1.5, quality=0.71),
    # a greedy cell that is not lossless: must be flagged
    cell(
        method="eagle",
        label="EAGLE",
        views=None,
        weights=None,
        hp="g4-bad",
        gamma=4,
        tau=3.1,
        speedup=2.1,
        lossless_rate=0.9,
    ),
    # a sampling cell: no lossless_rate, a quality drop
    cell(
        method="sps",
        hp="g4-t1",
        gamma=4,
        acceptance="sampling",
        temperature=1.0,
        lossless_rate=None,
        quality=0.6,
        speedup=1.9,
        tau=2.7,
    ),
    # NaN quality and no gamma (e.g. a tree method), with a hostile string in its hp
    cell(
        method="tree",
        label="tree",
        hp=HOSTILE,
        gamma=None,
        quality=math.nan,
        speedup=1.2,
        tau=2.2,
        device="NVIDIA H200",
    ),
    ar_cell(pair="qwen-7b/qwen-0.5b"),
    cell(pair="qwen-7b/qwen-0.5b", seed=1, tau=2.4),
    # a dataset with only its AR cell
    ar_cell(dataset="docvqa"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> str:
    """The report of CELL_ROWS, rendered once for all page tests."""
    tmp = tmp_path_factory.mktemp("report")
    cells = tmp / "cells.parquet"
    write_table(pa.Table.from_pylist(CELL_ROWS, schema=CELLS), cells, CELLS)
    out = tmp / "sub" / "report.html"
    write_report(cells, out)
    assert out.exists()
    return out.read_text(encoding="utf-8")


def sections(page: str) -> dict[str, str]:
    """The HTML of each <h2 id=...> section (dataset x pair, summary, ...), keyed by its heading."""
    parts = re.split(r"<h2 id='([^']+)'>", page)
    found = {}
    for body in parts[2::2]:
        heading, _, rest = body.partition("</h2>")
        found[heading] = rest
    return found


TABLE_DATA = re.compile(
    r"<thead><tr>(.*?)</tr></thead>.*?<script type='application/json' class='table-data'>"
    r"(.*?)</script>",
    re.S,
)


def parsed_row(raw: dict, columns: list[str]) -> dict:
    """A data-table row as the browser draws it: per column its text, class and title; the row's
    class; its sub-rows (a pooled row's seeds), likewise."""
    cells = [c if isinstance(c, list) else [c] for c in raw["c"]]
    assert len(cells) == len(columns)
    return {
        "text": {col: c[0] for col, c in zip(columns, cells, strict=True)},
        "cls": {col: c[1] if len(c) > 1 else "" for col, c in zip(columns, cells, strict=True)},
        "title": {col: c[2] if len(c) > 2 else "" for col, c in zip(columns, cells, strict=True)},
        "class": raw.get("k", ""),
        "seeds": [parsed_row(sub, columns) for sub in raw.get("s", [])],
    }


def data_tables(html: str) -> list[tuple[list[str], list[dict]]]:
    """(columns, rows) of each data table in `html`, in page order."""
    found = []
    for head, data in TABLE_DATA.findall(html):
        columns = [html_unescape(c) for c in re.findall(r"<th>(.*?)</th>", head)]
        rows = json.loads(data)["rows"]
        found.append((columns, [parsed_row(r, columns) for r in rows]))
    return found


def table_data(section: str) -> list[dict]:
    """The rows of the first data table of a section (the method table of a dataset section)."""
    return data_tables(section)[0][1]


def page_of(tmp_path, cell_rows: list[dict]) -> str:
    """The report of `cell_rows`, without blocks."""
    cells = tmp_path / "cells.parquet"
    write_table(pa.Table.from_pylist(cell_rows, schema=CELLS), cells, CELLS)
    write_report(cells, tmp_path / "report.html")
    return (tmp_path / "report.html").read_text(encoding="utf-8")


# ---- pareto_front ----------------------------------------------------------------------------


def test_pareto_front_basic():
    points = [(1.0, 0.9), (2.0, 0.8), (1.5, 0.7), (3.0, 0.5), (0.5, 0.95), (2.5, 0.4)]
    assert pareto_front(points) == [0, 1, 3, 4]


def test_pareto_front_ties_and_edge_cases():
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [0]
    # identical points dominate neither one another
    assert pareto_front([(1.0, 1.0), (1.0, 1.0), (0.5, 0.5)]) == [0, 1]
    # equal on one coordinate, worse on the other: dominated
    assert pareto_front([(1.0, 1.0), (1.0, 0.5), (0.5, 1.0)]) == [0]
    # NaN points are neither on the front nor dominating
    assert pareto_front([(math.nan, 5.0), (1.0, 1.0), (2.0, math.nan)]) == [1]


def test_fmt_num():
    assert fmt_num(None) == "–"
    assert fmt_num(math.nan) == "–"
    assert fmt_num(2.345) == "2.35"
    assert fmt_num(0.9) == "0.900"
    assert fmt_num(0.05123) == "0.0512"
    assert fmt_num(12.34) == "12.3"
    assert fmt_num(1234.5) == "1234"
    assert fmt_num(20.0, integer=True) == "20"


# ---- the page --------------------------------------------------------------------------------


def test_self_contained(report):
    # no external script, stylesheet or other resource
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", report, re.I)
    assert not re.search(r"@import", report)
    # plotly.js inlined exactly once
    assert report.count(get_plotlyjs()[:200]) == 1
    assert report.count("<div id=") >= 2 and "Plotly.newPlot" in report


def test_header(report):
    assert "<h1>mmspec report</h1>" in report
    assert f"{len(CELL_ROWS)} cells" in report
    assert "NVIDIA H100" in report and "NVIDIA H200" in report
    assert "Metric definitions" in report
    assert "tau / (k * c + 1)" in report


def test_section_per_dataset_and_pair(report):
    expected = sorted({(r["dataset"], r["pair"]) for r in CELL_ROWS})
    found = [h for h in sections(report) if " · " in h]
    assert found == [f"{d} · {p}" for d, p in expected]


def test_method_table_lists_every_cell(report):
    by_heading = sections(report)
    for dataset, pair in {(r["dataset"], r["pair"]) for r in CELL_ROWS}:
        rows = table_data(by_heading[f"{dataset} · {pair}"])
        cells = [r for r in CELL_ROWS if (r["dataset"], r["pair"]) == (dataset, pair)]
        # one seed per method and hp here: each cell is its own pooled row, with no seed rows
        assert len(rows) == len(cells)
        assert sorted(r["text"]["hp"] for r in rows) == sorted(c["hp"] for c in cells)
        assert all(r["text"]["seeds"] == "1" and r["seeds"] == [] for r in rows)
        seeds = {r["text"]["hp"]: r["title"]["seeds"] for r in rows}
        assert seeds == {c["hp"]: f"seed {c['seed']}" for c in cells}


def all_rows(page: str) -> list[dict]:
    """The rows of every method table of a page (every dataset section's)."""
    return [
        row
        for heading, body in sections(page).items()
        if " · " in heading
        for row in table_data(body)
    ]


def test_greedy_non_lossless_cell_flagged(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    bad = [r for r in table_data(body) if r["text"]["hp"] == "g4-bad"]
    assert len(bad) == 1 and "bug" in bad[0]["class"].split()
    assert bad[0]["text"]["lossless_rate"] == "0.900"
    assert bad[0]["cls"]["lossless_rate"] == "bug-cell"
    assert "this is a bug" in body
    # and only that one: lossless greedy cells and sampling cells are not
    assert len([r for r in all_rows(report) if "bug" in r["class"].split()]) == 1
    assert "1 greedy cell(s) with lossless_rate" in report


def test_lossy_rule_divergence_is_not_a_bug(tmp_path):
    page = page_of(
        tmp_path,
        [
            ar_cell(),
            cell(hp="g4-lossless", lossless_rate=0.5, first_divergence_mean=7.0),
            cell(
                method="lantern",
                label="LANTERN",
                hp="g4-lossy",
                acceptance="lantern",
                lossless_rule=False,
                lossless_rate=0.5,
                first_divergence_mean=9.0,
            ),
        ],
    )
    body = sections(page)[f"chartqa · {PAIR}"]
    rows = {r["text"]["hp"]: r for r in table_data(body)}
    divergence = ["lossless_rate", "first_divergence_mean"]
    # the greedy cell of a lossless rule is a bug, in red
    lossless = rows["g4-lossless"]
    assert "bug" in lossless["class"].split()
    assert [lossless["text"][c] for c in divergence] == ["0.500", "7.00"]
    assert [lossless["cls"][c] for c in divergence] == ["bug-cell", "bug-cell"]
    # the lossy rule's divergence is shown, but neutral, with the legend
    lossy = rows["g4-lossy"]
    assert "bug" not in lossy["class"]
    assert [lossy["text"][c] for c in divergence] == ["0.500", "9.00"]
    assert [lossy["cls"][c] for c in divergence] == ["lossy-cell", "lossy-cell"]
    assert {lossy["title"][c] for c in divergence} == {
        "lossy rule: divergence is expected, see retention"
    }
    assert "<p class='note'>lossy rule: divergence is expected, see retention" in body
    assert "LANTERN g4-lossy seed 0" in body
    assert "1 greedy cell(s) with lossless_rate" in page
    [alert] = re.findall(r"<p class='alert'>.*?</p>", body)
    assert "g4-lossless" in alert and "g4-lossy" not in alert


def test_lossless_rule_unknown_counts_as_lossless(tmp_path):
    page = page_of(tmp_path, [cell(lossless_rule=None, lossless_rate=0.5)])
    assert "1 greedy cell(s) with lossless_rate" in page
    [row] = all_rows(page)
    assert "bug" in row["class"] and "lossy-cell" not in row["cls"].values()


def test_metric_definitions(report):
    assert "new_tokens / steps, pooled over the cell" in report
    assert "cut by a stop token or max_new_tokens is not counted" in report
    assert "emitted draft tokens / steps" in report
    assert "AR decode time per emitted token / method decode time per emitted token" in report
    assert "greedy and sampling alike" in report


def test_best_speedup_bold(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    best = [r for r in table_data(body) if "best" in r["class"].split()]
    assert len(best) == 1 and best[0]["text"]["hp"] == "g4-bad"


def test_data_strings_escaped(report):
    assert HOSTILE not in report
    # in a table's JSON, where the browser sets it as text
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in report
    rows = table_data(sections(report)[f"chartqa · {PAIR}"])
    assert HOSTILE in [r["text"]["hp"] for r in rows]


def test_degenerate_sections(report):
    only_ar = sections(report)[f"docvqa · {PAIR}"]
    assert "Not plotted: no cell has a gamma" in only_ar
    assert "–" in only_ar  # AR has no speedup_eq1


def test_cross_dataset_summary(report):
    summary = report[report.index("<h2 id='summary'>") :]
    assert f"<h3>tau · {PAIR}</h3>" in summary and f"<h3>speedup · {PAIR}</h3>" in summary
    assert "<th>chartqa</th><th>docvqa</th>" in summary


def test_empty_table(tmp_path):
    assert "0 cells" in page_of(tmp_path, [])


def test_method_table_columns(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    assert "<th>n_samples</th><th>steps</th><th>new_tokens</th><th>tau</th>" in body
    counts = {
        tuple(r["text"][c] for c in ("n_samples", "steps", "new_tokens")) for r in table_data(body)
    }
    assert ("20", "400", "1000") in counts
    assert "<th>lossless_rate</th><th>first_divergence_mean</th>" in body
    # caption time next to prefill time
    assert "<th>prefill_s</th><th>caption_s</th>" in body
    assert "computed once per image in a cached stage" in report


def test_method_table_sortable_and_filterable(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    box = body[: body.index("</table>")]
    assert box.startswith("\n<div class='data-table'><input type='search' class='filter'")
    assert "<table class='cells'>" in box
    # the rows travel as JSON that the script draws a page at a time, with a pager
    assert "<tbody></tbody>" in box and "button type='button' class='prev'" in body
    # the script that draws, sorts and filters is inlined once, in the head, and writes no HTML
    head = report[: report.index("</head>")]
    assert head.count("div.data-table") == 1 and report.count("div.data-table") == 1
    assert "innerHTML" not in datatable.TABLE_JS and "textContent" in datatable.TABLE_JS


def test_no_weights_section_without_blocks(report):
    assert "Block efficiency by dataset" in report
    assert "Ensemble weights over decoding" not in report and "id='weights'" not in report


# ---- block efficiency by dataset -------------------------------------------------------------


def grid_cell(label: str, views: str, dataset: str, tau: float, **overrides) -> dict:
    """A cell of the block-efficiency grid: d1, d2 are benchmarks, d3 is out of distribution."""
    policy = "kld" if len(views) > 1 else "static"
    base = dict(
        method=label.split("^")[0].lower(),
        label=label,
        views=views,
        weights=policy,
        dataset=dataset,
        group="ood" if dataset == "d3" else "benchmark",
        tau=tau,
    )
    return cell(**{**base, **overrides})


# label -> tau on d1, d2, d3; TABED's d1 is the mean of two seeds (2.0, 2.4)
GRID = {"TABED^MT": (2.2, 3.0, 2.8), "M": (2.0, 3.0, 2.5), "T": (1.5, 2.0, 3.0)}


def grid_rows() -> list[dict]:
    rows = [ar_cell(dataset=d, group="ood" if d == "d3" else "benchmark") for d in ("d1", "d2")]
    for label, taus in GRID.items():
        views = label.split("^")[-1]
        for dataset, tau in zip(("d1", "d2", "d3"), taus, strict=True):
            if (label, dataset) == ("TABED^MT", "d1"):
                rows.append(grid_cell(label, views, dataset, 2.0, seed=0))
                rows.append(grid_cell(label, views, dataset, 2.4, seed=1))
            else:
                rows.append(grid_cell(label, views, dataset, tau))
    return rows


def table_rows(section: str) -> dict[str, list[str]]:
    """The <td> contents of each body row of the first table in `section`, by first cell."""
    table = section[section.index("<tbody>") : section.index("</tbody>")]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table):
        tds = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        rows[tds[0]] = tds[1:]
    return rows


def test_tau_by_dataset_group_averages():
    cells = with_labels(pd.DataFrame(grid_rows()))
    table = tau_by_dataset(cells)
    # single views first, then the ensemble; AR is left out
    assert list(table.index) == ["M", "T", "TABED^MT"]
    assert [c for c in table.columns] == [
        ("dataset", "d1"),
        ("dataset", "d2"),
        ("dataset", "d3"),
        ("group", "benchmark"),
        ("group", "ood"),
        ("all", ""),
    ]
    tabed = table.loc["TABED^MT"]
    assert tabed[("dataset", "d1")] == pytest.approx(2.2)  # mean over seeds
    assert tabed[("group", "benchmark")] == pytest.approx((2.2 + 3.0) / 2)
    assert tabed[("group", "ood")] == pytest.approx(2.8)
    assert tabed[("all", "")] == pytest.approx((2.2 + 3.0 + 2.8) / 3)
    t = table.loc["T"]
    assert t[("group", "benchmark")] == pytest.approx(1.75)
    assert t[("all", "")] == pytest.approx(6.5 / 3)


def test_tau_by_dataset_incomplete_group_and_hp_sweep():
    rows = grid_rows() + [
        # on d1 and d3 only: its benchmark and overall averages are undefined
        grid_cell("C", "C", "d1", 2.1),
        grid_cell("C", "C", "d3", 2.3),
        # a gamma sweep of one label: one row per hp
        grid_cell("P", "P", "d1", 1.8, hp="g3", gamma=3),
        grid_cell("P", "P", "d1", 1.9, hp="g5", gamma=5),
    ]
    table = tau_by_dataset(with_labels(pd.DataFrame(rows)))
    assert list(table.index) == ["M", "T", "C", "P · g3", "P · g5", "TABED^MT"]
    c = table.loc["C"]
    assert math.isnan(c[("group", "benchmark")]) and math.isnan(c[("all", "")])
    assert c[("group", "ood")] == pytest.approx(2.3)


def test_block_efficiency_marks(tmp_path):
    section = sections(page_of(tmp_path, grid_rows()))["Block efficiency by dataset"]
    assert "new_tokens / steps" in section and "every one of them" in section
    assert f"<h3>{PAIR} · greedy · temperature 0</h3>" in section
    head = section[section.index("<thead>") : section.index("</thead>")]
    assert re.findall(r"<th>(.*?)</th>", head) == [
        "method",
        "d1",
        "d2",
        "d3",
        "avg benchmark",
        "avg ood",
        "avg all",
    ]
    rows = table_rows(section)
    assert list(rows) == ["M", "T", "TABED<sup>MT</sup>"]  # no AR row
    assert rows["TABED<sup>MT</sup>"] == [
        "<b>2.20</b>",  # d1: best
        "<b>3.00</b>",  # d2: tied with M, both bold
        "<u>2.80</u>",  # d3: second
        "<b>2.60</b>",
        "<u>2.80</u>",
        "<b>2.67</b>",
    ]
    assert rows["M"] == ["<u>2.00</u>", "<b>3.00</b>", "2.50", "<u>2.50</u>", "2.50", "<u>2.50</u>"]
    assert rows["T"] == ["1.50", "<u>2.00</u>", "<b>3.00</b>", "1.75", "<b>3.00</b>", "2.17"]


# ---- ensemble weights over decoding ----------------------------------------------------------

# (position, drafted, accepted, weights) of each step of a sample-turn: blocks [0, 3) all accepted,
# [3, 5) with a rejection, [5, 10) all accepted.
STEPS = [(0, 2, 2, [0.7, 0.3]), (3, 3, 1, [0.5, 0.5]), (5, 4, 4, [0.2, 0.8])]


def block_rows(cell_row: dict, samples: list[str], steps=STEPS) -> list[dict]:
    """BLOCKS rows of `cell_row` for each sample (turn 0), all with the same steps."""
    rows = []
    for sample_id in samples:
        for index, (position, drafted, accepted, weights) in enumerate(steps):
            rows.append(
                {
                    **{k: cell_row[k] for k in ("dataset", "pair", "method", "hp", "seed")},
                    "label": cell_row["label"],
                    "views": cell_row["views"],
                    "sample_id": sample_id,
                    "turn": 0,
                    "step": index,
                    "position": position,
                    "drafted": drafted,
                    "accepted": accepted,
                    "weights": weights,
                }
            )
    return rows


def decoded(page: str) -> str:
    """The page with the \\uXXXX escapes of plotly's figure JSON decoded, as a browser reads it.

    The data tables' JSON is left as it is: its strings are set as text, never read as HTML
    (`data_tables` reads them)."""
    parts = re.split(r"(<script type='application/json' class='table-data'>.*?</script>)", page)
    return "".join(
        part if part.startswith("<script type='application/json'") else decode_json(part)
        for part in parts
    )


def decode_json(text: str) -> str:
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)


def weights_page(tmp_path, cell_rows: list[dict], block_rows_: list[dict]) -> str:
    cells = tmp_path / "cells.parquet"
    blocks = tmp_path / "blocks.parquet"
    write_table(pa.Table.from_pylist(cell_rows, schema=CELLS), cells, CELLS)
    write_table(pa.Table.from_pylist(block_rows_, schema=BLOCKS), blocks, BLOCKS)
    out = tmp_path / "report.html"
    write_report(cells, out, blocks_path=blocks)
    return decoded(out.read_text(encoding="utf-8"))


def weight_cells() -> list[dict]:
    tabed = [grid_cell("TABED^MT", "MT", d, 2.5) for d in ("d1", "d2")]
    return [
        *tabed,
        # a second seed of the same cell: only the first seed is plotted
        grid_cell("TABED^MT", "MT", "d1", 2.5, seed=1),
        # static weights, and a single view: not plotted
        grid_cell("MT = Static^MT", "MT", "d1", 2.4, method="static_mt", weights="static"),
        grid_cell("M", "M", "d1", 2.2),
        ar_cell(dataset="d1"),
    ]


def test_weights_section(tmp_path):
    cell_rows = weight_cells()
    samples = ["s0", "s1", "s2", "s3"]
    blocks = [r for c in cell_rows if c["method"] != "ar" for r in block_rows(c, samples)]
    page = weights_page(tmp_path, cell_rows, blocks)
    section = sections(page)["Ensemble weights over decoding"]
    assert "href='#weights'" in page
    # one figure per dataset of the TABED cell
    assert section.count("Plotly.newPlot") == 2
    assert "d1 · TABED<sup>MT</sup> · g4 · seed 0" in section
    assert "seed 1" not in section and "Static" not in section
    # the first three sample-turns, as small multiples
    assert "sample s2 · turn 0" in section and "sample s3" not in section
    # the M share as a step line that holds the last step's value until its block ends
    assert section.count('"x":[0,3,5,10],"y":[0.7,0.5,0.2,0.2]') == 2 * 3
    # shading: blocks [0, 3) and [5, 10) all accepted (green), [3, 5) with a rejection (red)
    assert section.count('"width":[3,5],"x":[0,5]') == 2 * 3
    assert section.count('"width":[2],"x":[3]') == 2 * 3
    assert "[position, position + accepted + 1)" in section
    assert "M only" in section and "T only" in section and "static MT" in section


def test_weights_share_ignores_other_views_and_figure_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(report_weights, "MAX_WEIGHT_FIGURES", 1)
    cell_rows = [grid_cell("TABED^MTC", "MTC", d, 2.5) for d in ("d1", "d2")]
    steps = [(0, 2, 1, [0.6, 0.2, 0.2]), (2, 2, 2, [0.1, 0.3, 0.6])]
    blocks = [r for c in cell_rows for r in block_rows(c, ["s0"], steps)]
    section = sections(weights_page(tmp_path, cell_rows, blocks))["Ensemble weights over decoding"]
    assert section.count("Plotly.newPlot") == 1
    assert '"y":[0.75,0.25,0.25]' in section
    assert "1 more cell(s) not plotted" in section


def test_weights_section_without_eligible_cells(tmp_path):
    page = weights_page(tmp_path, [grid_cell("M", "M", "d1", 2.2)], [])
    section = sections(page)["Ensemble weights over decoding"]
    assert "Plotly.newPlot" not in section and "No cell has an ensemble" in section


def test_hostile_label_dataset_and_sample_escaped(tmp_path):
    dataset = "d1'\"><img src=x onerror=alert(2)>"
    cell_rows = [
        {**grid_cell("TABED^MT", "MT", dataset, 2.5), "label": HOSTILE + "^MT"},
        {**grid_cell("M", "M", dataset, 2.0), "label": HOSTILE},
        ar_cell(dataset=dataset),
    ]
    blocks = block_rows(cell_rows[0], [HOSTILE])
    page = weights_page(tmp_path, cell_rows, blocks)
    assert HOSTILE not in page and "<img" not in page and "onerror=alert(2)>" not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    rows = table_rows(sections(page)["Block efficiency by dataset"])
    # a label that does not spell its views gets them appended
    assert list(rows) == [escaped + " · M", escaped + "<sup>MT</sup>"]
    weights = sections(page)["Ensemble weights over decoding"]
    assert f"sample {escaped} · turn 0" in weights
    assert "d1&#x27;&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in weights
    # the method table's JSON holds the strings as they are, for the browser to set as text
    section = sections(page)[f"{esc(dataset)} · {PAIR}"]
    labels = [r["text"]["label"] for r in table_data(section)]
    assert labels == ["ar", HOSTILE, HOSTILE + "^MT"]


# ---- acceptance by draft position and tree methods side by side ------------------------------


def tree_cell(label: str, tree: str, dataset: str, tau: float, speedup: float, **overrides):
    """A drafting cell with a tree policy in its hparams (no views, like a trained head)."""
    hp = overrides.pop("hp", tree)
    base = dict(
        method=label.lower(),
        label=label,
        views=None,
        weights=None,
        gamma=None,
        hp=hp,
        hparams=json.dumps({"tree": tree}),
        tree=tree,
        dataset=dataset,
        tau=tau,
        speedup=speedup,
        tokens_per_s=30.0 * speedup,
    )
    return cell(**{**base, **overrides})


def step_rows(cell_row: dict, steps: list[tuple], sample_id: str = "s0") -> list[dict]:
    """BLOCKS rows of `cell_row` from (drafted, accepted, depth, width) per step."""
    return [
        {
            **{k: cell_row[k] for k in ("dataset", "pair", "method", "hp", "seed")},
            "label": cell_row["label"],
            "views": cell_row["views"],
            "sample_id": sample_id,
            "turn": 0,
            "step": index,
            "position": index,
            "drafted": drafted,
            "accepted": accepted,
            "depth": depth,
            "width": width,
            "weights": [1.0],
        }
        for index, (drafted, accepted, depth, width) in enumerate(steps)
    ]


def tree_cells() -> list[dict]:
    return [
        ar_cell(dataset="d1"),
        ar_cell(dataset="d2"),
        tree_cell("SPS", "chain", "d1", 2.0, 1.8, hp="g2", gamma=2),
        tree_cell("SPS", "chain", "d2", 2.1, 2.5, hp="g2", gamma=2),
        tree_cell("EAGLE", "static", "d1", 3.0, 2.2),
        tree_cell("EAGLE", "static", "d2", 3.2, 2.0),
        tree_cell("SAGE", "sage", "d1", 3.5, 2.0, hp=HOSTILE, draft_visual_share=0.1),
        # two seeds on d2: tau 3.2 on average, tied with EAGLE at the displayed precision
        tree_cell("SAGE", "sage", "d2", 3.0, 1.9, hp=HOSTILE, seed=0, draft_visual_share=0.1),
        tree_cell("SAGE", "sage", "d2", 3.4, 2.1, hp=HOSTILE, seed=1, draft_visual_share=0.1),
        # a pair without blocks rows: no table for it
        tree_cell("SPS", "chain", "d1", 2.0, 1.5, hp="g2", gamma=2, pair="qwen-7b/qwen-0.5b"),
    ]


def tree_blocks(cell_rows: list[dict]) -> list[dict]:
    by = {(c["dataset"], c["label"], c["seed"], c["pair"]): c for c in cell_rows}
    sage_d1 = by[("d1", "SAGE", 0, PAIR)]
    rows = step_rows(sage_d1, [(6, 0, 3, 2), (8, 1, 3, 3), (10, 3, 3, 4), (4, 3, 3, 2)])
    # a chain of gamma 2; one step without a recorded depth counts with depth = drafted
    rows += step_rows(by[("d1", "SPS", 0, PAIR)], [(2, 0, 2, 1), (2, 2, 2, 1), (2, 1, None, None)])
    # a static tree of depth 2; its step without a recorded depth is left out of the curve only
    eagle = [(5, 2, 2, 3), (5, 0, 2, 3), (9, 4, None, None)]
    rows += step_rows(by[("d1", "EAGLE", 0, PAIR)], eagle)
    rows += step_rows(by[("d2", "SAGE", 0, PAIR)], [(4, 1, 2, 2), (4, 2, 2, 2)])
    rows += step_rows(by[("d2", "SAGE", 1, PAIR)], [(10, 4, 4, 3)])
    rows += step_rows(by[("d2", "SPS", 0, PAIR)], [(2, 2, 2, 1)])
    return rows


def figures(section: str) -> list[tuple[str, list[dict]]]:
    """(title, traces) of each plotly figure of a section."""
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", section):
        data, end = decoder.raw_decode(section, match.end())
        layout, _ = decoder.raw_decode(section, end + re.match(r",\s*", section[end:]).end())
        found.append((layout["title"]["text"], data))
    return found


def trace_xy(traces: list[dict], name: str) -> tuple[list, list]:
    """x and y of the one trace named `name`."""
    found = [(t["x"], t["y"]) for t in traces if t.get("name") == name]
    assert len(found) == 1, (name, len(found))
    return found[0]


def test_acceptance_by_position(tmp_path):
    cell_rows = tree_cells()
    page = weights_page(tmp_path, cell_rows, tree_blocks(cell_rows))
    assert "href='#acceptance-position'" in page and "href='#tree-methods'" in page
    section = sections(page)["Acceptance by draft position"]
    assert "whose accepted path length is &ge; d" in section and "proposal depth" in section
    # one figure per dataset of the first pair
    (title1, d1), (title2, d2) = figures(section)
    assert title1 == "d1 · acceptance by draft position"
    assert title2 == "d2 · acceptance by draft position"
    # depth 3, accepted [0, 1, 3, 3]
    assert trace_xy(d1, "SAGE") == ([1, 2, 3], [0.75, 0.5, 0.5])
    # depth 2, accepted [0, 2, 1]: counts only toward d <= 2
    assert trace_xy(d1, "SPS") == ([1, 2], [round(2 / 3, 4), round(1 / 3, 4)])
    # depth 2, accepted [2, 0]; the step without a depth is left out
    assert trace_xy(d1, "EAGLE") == ([1, 2], [0.5, 0.5])
    # trees first, then chains
    assert [t["name"] for t in d1] == ["EAGLE", "SAGE", "SPS"]
    # seeds pooled: depths [2, 2, 4], accepted [1, 2, 4]
    assert trace_xy(d2, "SAGE") == ([1, 2, 3, 4], [1.0, round(2 / 3, 4), 1.0, 1.0])
    assert "qwen" not in section


def test_acceptance_line_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(report_acceptance, "MAX_ACCEPTANCE_LINES", 1)
    cell_rows = tree_cells()
    section = sections(weights_page(tmp_path, cell_rows, tree_blocks(cell_rows)))[
        "Acceptance by draft position"
    ]
    # d1: EAGLE kept (a tree), SAGE and SPS left out; d2: SAGE kept, SPS left out
    assert [[t["name"] for t in traces] for _, traces in figures(section)] == [["EAGLE"], ["SAGE"]]
    assert "3 more line(s) not plotted" in section


def tree_table_rows(section: str, pair: str) -> dict[str, list[str]]:
    """The <td> contents after the method name of each row of `pair`'s tree table."""
    return table_rows(section[section.index(f"<h3>{pair}</h3>") :])


def test_tree_methods_side_by_side(tmp_path):
    cell_rows = tree_cells()
    page = weights_page(tmp_path, cell_rows, tree_blocks(cell_rows))
    section = sections(page)["Tree methods side by side"]
    head = section[section.index("<thead>") + len("<thead>") : section.index("</thead>")]
    assert re.findall(r"<th[^>]*>(.*?)</th>", head) == [
        "method",
        "hp",
        "tree",
        "d1",
        "d2",
        *(["τ", "tokens/s", "speedup", "tree size", "visual seen"] * 2),
    ]
    rows = tree_table_rows(section, PAIR)
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # by tree policy: chain, static, sage; AR left out. Per dataset: tau, tokens/s, speedup,
    # tree size (mean drafted per step, pooled over the steps of all seeds).
    assert {name: row[:2] for name, row in rows.items()} == {
        "SPS": ["g2", "chain"],
        "EAGLE": ["static", "static"],
        "SAGE": [escaped, "sage"],
    }
    assert {name: row[2:7] for name, row in rows.items()} == {  # d1 (last: visual seen)
        "SPS": ["2.00", "54.0", "1.80", "2.00", "1.00"],
        "EAGLE": ["3.00", "66.0", "<b>2.20</b>", "6.33", "1.00"],  # tree size (5 + 5 + 9) / 3
        "SAGE": ["<b>3.50</b>", "60.0", "2.00", "7.00", "0.100"],
    }
    assert {name: row[7:] for name, row in rows.items()} == {  # d2
        "SPS": ["2.10", "75.0", "<b>2.50</b>", "2.00", "1.00"],
        "EAGLE": ["<b>3.20</b>", "60.0", "2.00", "–", "1.00"],  # no steps in the blocks table
        # tree size (4 + 4 + 10) / 3, not (4 + 10) / 2
        "SAGE": ["<b>3.20</b>", "60.0", "2.00", "6.00", "0.100"],
    }
    assert "qwen" not in section  # a pair without steps
    # tau against mean tree size, one point per dataset and hp: d2's two seeds pooled, the tree
    # size (4 + 4 + 10) / 3 over their steps, tau (3.0 + 3.4) / 2
    [(title, traces)] = figures(section)
    assert title == f"{PAIR} · tau vs mean tree size"
    x, y = trace_xy(traces, "SAGE")
    assert sorted(zip(x, y, strict=True)) == [(6.0, pytest.approx(3.2)), (7.0, 3.5)]
    assert trace_xy(traces, "EAGLE") == ([6.3333], [3.0])
    assert f"dataset: d2<br>hp: {escaped}<br>seeds: 2" in section
    assert HOSTILE not in page


def test_tree_sections_absent_without_blocks(tmp_path, report):
    for page in (report, weights_page(tmp_path, tree_cells(), [])):
        assert "Acceptance by draft position" not in page and "id='acceptance-position'" not in page
        assert "Tree methods side by side" not in page and "id='tree-methods'" not in page


def test_step_stats_streamed_in_batches(tmp_path, monkeypatch):
    cell_rows = tree_cells()
    blocks = tmp_path / "blocks.parquet"
    write_table(pa.Table.from_pylist(tree_blocks(cell_rows), schema=BLOCKS), blocks, BLOCKS)
    whole = report_blocks.load_step_stats(blocks)
    monkeypatch.setattr(report_blocks, "STATS_BATCH_ROWS", 2)
    batched = report_blocks.load_step_stats(blocks)
    key = report_blocks.STEP_STATS_KEY
    assert (
        batched.sort_values(key)
        .reset_index(drop=True)
        .equals(whole.sort_values(key).reset_index(drop=True))
    )
    assert int(whole["steps"].sum()) == len(tree_blocks(cell_rows))
    assert int(whole["drafted_sum"].sum()) == sum(r["drafted"] for r in tree_blocks(cell_rows))


def test_speedups_within_noise_of_ar_are_marked(tmp_path):
    page = page_of(
        tmp_path,
        [
            ar_cell(speedup=1.02, speedup_low=0.97, speedup_high=1.06),
            cell(hp="fast", speedup=1.6, speedup_low=1.5, speedup_high=1.7),
            cell(hp="noisy", speedup=1.05, speedup_low=0.96, speedup_high=1.14),
        ],
    )
    assert "<th>speedup_low</th>" in page and "<th>speedup_high</th>" in page
    assert page.count("noise-cell") == 2 + 1  # AR's and noisy's cells, and the stylesheet
    note = page[page.index("AR (in grey)") :].split("</p>")[0]
    assert "noisy" in note and "fast" not in note and "ar default" not in note


# ---- loose verification ----------------------------------------------------------------------


def loose_rows() -> list[dict]:
    """A judged video dataset: AR, exact SD and loose cells, one with two failed judgements."""
    base = dict(dataset="vdd", gamma=10, judge_failures=0, ar_judge_score=3.0)

    def loose(rule, label, hp, speedup, tau, relaxed, retention, judge_score, **more):
        return cell(
            **{**base, **more},
            method=rule,
            label=label,
            hp=hp,
            acceptance=rule,
            lossless_rule=False,
            speedup=speedup,
            tau=tau,
            relaxed_share=relaxed,
            retention=retention,
            judge_score=judge_score,
            judge_retention=judge_score / 3.0,
        )

    judged = dict(judge_score=3.0, judge_retention=1.0)
    return [
        ar_cell(**base, **judged),
        cell(**base, **judged, method="sd10", label="SD", hp="g10", speedup=1.5, tau=4.0),
        loose("lvspec", "LVSpec", "l0.7", 1.9, 6.0, 0.2, 0.95, 2.94),
        loose("random_relax", "Random", "r0.5", 1.8, 5.5, 0.3, 0.9, 2.7, judge_failures=2),
    ]


def test_loose_section_frontier_and_retention_table(tmp_path):
    page = page_of(tmp_path, loose_rows())
    found = sections(page)
    section = found["Loose verification: retention vs speedup"]
    table = section[section.index("<table") :]
    rows = {re.sub("<[^>]+>", "", r.split("</td>")[0]): r for r in table.split("<tr>")[2:]}
    # LVSpec is faster and retains more than random relaxation: it is on the frontier, random
    # is not; SD (slower, retention 1) is on it too
    assert rows["◆ LVSpec"] and rows["◆ SD"] and "Random" in rows
    assert "0.980" in rows["◆ LVSpec"] and ">2<" in rows["Random"]
    # the judge retention is the plotted axis, and the method table shows the judge columns
    assert "quality retention" in section
    sec = next(v for k, v in found.items() if k.startswith("vdd"))
    assert "judge_failures" in sec and "relaxed_share" in sec


def test_loose_retentions_carry_their_intervals_in_table_and_figure(tmp_path):
    rows = loose_rows()
    rows[2].update(judge_retention_low=0.95, judge_retention_high=0.99)
    rows[2].update(retention_low=0.9, retention_high=0.97)
    section = sections(page_of(tmp_path, rows))["Loose verification: retention vs speedup"]
    table = section[section.index("<table") :]
    lvspec = next(r for r in table.split("<tr>") if "LVSpec" in r)
    assert "[0.950, 0.990]" in lvspec and "[0.900, 0.970]" in lvspec
    random = next(r for r in table.split("<tr>") if "Random" in r)
    assert "[" not in random  # no interval measured, none shown
    # the plotted (judge) retention's bar: 0.99 - 0.98 above, 0.98 - 0.95 below
    assert '"error_y"' in section
    cells = pd.DataFrame(rows)
    points = cells.assign(**report_loose.retention_axis(cells)).iloc[1:]
    figure = report_loose.retention_figure(points, points.iloc[:0], "vdd")
    bar = next(t for t in figure.data if t.name == "lvspec").error_y
    assert (bar.array[0], bar.arrayminus[0]) == pytest.approx((0.01, 0.03))


def test_no_loose_section_without_loose_cells(report):
    assert "Loose verification" not in report


# ---- seeds pooled, the frontier and summary first ----------------------------------------------

# tau, speedup and lossless_rate of one method and hp over three seeds (seed 1 diverged)
SEEDS = [(2.0, 1.4, 1.0), (2.4, 1.6, 0.9), (2.9, 1.9, 1.0)]
T_TWO_DF = 4.303  # t(0.975, 2)


def seeds_rows() -> list[dict]:
    return [ar_cell(seed=s, speedup=1.0) for s in range(3)] + [
        cell(seed=s, tau=tau, speedup=speedup, lossless_rate=rate, steps=400 + s)
        for s, (tau, speedup, rate) in enumerate(SEEDS)
    ]


def t_interval(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T_TWO_DF * sd / math.sqrt(len(values))
    return mean - half, mean + half


def test_t975():
    assert pooled.t975(1) == 12.706 and pooled.t975(2) == T_TWO_DF
    assert pooled.t975(40) == pytest.approx(2.0211, abs=1e-4)  # tables: 2.021
    assert pooled.t975(120) == pytest.approx(1.9799, abs=1e-4)  # tables: 1.980
    assert pooled.t975(10**6) == pytest.approx(1.95996, abs=1e-4)


def test_pool_seeds_means_sums_and_intervals():
    cells = with_labels(pd.DataFrame(seeds_rows()))
    table = pooled.pool_seeds(cells).set_index("method")
    assert list(table.index) == ["ar", "sps"]  # table order: AR first
    sps = table.loc["sps"]
    assert sps["n_seeds"] == 3 and sps["seeds"] == [0, 1, 2]
    assert sps["tau"] == pytest.approx(sum(t for t, _, _ in SEEDS) / 3)
    assert sps["steps"] == 400 + 401 + 402 and sps["n_samples"] == 60  # counts summed
    assert sps["lossless_rate"] == pytest.approx(2.9 / 3)
    for metric, values in (
        ("tau", [t for t, _, _ in SEEDS]),
        ("speedup", [s for _, s, _ in SEEDS]),
    ):
        assert (sps[f"{metric}_low"], sps[f"{metric}_high"]) == pytest.approx(t_interval(values))
    # the members, by seed: index labels into `cells`
    assert list(cells.loc[sps["_members"], "seed"]) == [0, 1, 2]


def test_pool_seeds_one_seed_keeps_its_own_interval():
    cells = with_labels(pd.DataFrame([cell(speedup=1.5, speedup_low=1.2, speedup_high=1.8)]))
    [row] = pooled.pool_seeds(cells).to_dict("records")
    assert (row["speedup_low"], row["speedup_high"]) == (1.2, 1.8)  # the cell's bootstrap
    assert math.isnan(row["tau_low"])  # no interval from one seed


def test_method_table_pools_seeds_with_each_seed_one_click_away(tmp_path):
    page = page_of(tmp_path, seeds_rows())
    section = sections(page)[f"chartqa · {PAIR}"]
    ar, sps = table_data(section)
    assert sps["text"]["seeds"] == "3" and sps["title"]["seeds"] == "seeds 0, 1, 2"
    assert sps["text"]["tau"] == fmt_num(sum(t for t, _, _ in SEEDS) / 3)
    low, high = t_interval([t for t, _, _ in SEEDS])
    assert (
        sps["title"]["tau"] == f"mean of 3 seeds; 95% t interval [{fmt_num(low)}, {fmt_num(high)}]"
    )
    low, high = t_interval([s for _, s, _ in SEEDS])
    assert (sps["text"]["speedup_low"], sps["text"]["speedup_high"]) == (
        fmt_num(low),
        fmt_num(high),
    )
    assert sps["text"]["n_samples"] == "60"
    # the mean lossless_rate is below 1: the row is a bug, and the note names the seed
    assert "bug" in sps["class"].split() and "SPS g4 seed 1" in section
    assert "SPS g4 seed 0" not in section
    seeds = sps["seeds"]
    assert [s["text"]["seeds"] for s in seeds] == ["seed 0", "seed 1", "seed 2"]
    assert [s["text"]["tau"] for s in seeds] == [fmt_num(t) for t, _, _ in SEEDS]
    assert [s["class"] for s in seeds] == ["", "bug", ""]
    assert [s["text"]["hp"] for s in seeds] == ["", "", ""]  # the pooled row's, just above
    assert len(ar["seeds"]) == 3 and "bug" not in ar["class"]
    assert f"{len(seeds_rows())} cells · 2 rows with their seeds pooled" in page


def test_frontier_and_summary_first(tmp_path):
    page = page_of(tmp_path, seeds_rows() + [cell(hp="g2", gamma=2, speedup=1.2, quality=0.75)])
    order = re.findall(r"<h2 id='([^']+)'>", page)
    assert order[:4] == ["frontier", "summary", "definitions", "sec-0"]
    links = re.findall(r"<li><a href='#([^']+)'>", page)
    assert links[:3] == ["frontier", "summary", "definitions"]
    frontier = sections(page)["Pareto frontiers: speedup vs quality"]
    # pooled points: one per method and hp, the front through them
    [(title, traces)] = figures(frontier)
    assert title == "speedup vs quality"
    assert sorted(zip(*trace_xy(traces, "sps"), strict=True)) == [(1.2, 0.75), (1.6333, 0.7)]
    assert trace_xy(traces, "Pareto front") == ([1.2, 1.6333], [0.75, 0.7])
    [(columns, rows)] = data_tables(frontier)
    assert columns[:3] == ["on the front", "hp", "seeds"]
    low, high = t_interval([s for _, s, _ in SEEDS])
    assert [r["text"]["speedup"] for r in rows] == [
        "1.20",
        f"{fmt_num(sum(s for _, s, _ in SEEDS) / 3)} [{fmt_num(low)}, {fmt_num(high)}]",
    ]
    # the summary's values: means over seeds, the interval in their tooltip
    summary = sections(page)["Cross-dataset summary"]
    tau_table = data_tables(summary)[0][1]
    g4 = next(r for r in tau_table if r["text"]["hp"] == "g4")
    assert g4["text"]["chartqa"] == fmt_num(sum(t for t, _, _ in SEEDS) / 3)
    assert g4["title"]["chartqa"].startswith("mean of 3 seeds; 95% t interval [")


def test_report_cli_finds_the_sweeps_heads(tmp_path, monkeypatch):
    sweep = mmconfig.validate(mmconfig.load_as_snakemake(ROOT / "tests/configs/tiny_heads.yaml"))
    heads = cli.sweep_head_folders(sweep)
    # eagle_chain and eagle2 share a head (same training hyperparameters), eagle_long has its own
    assert len(heads) == 2 and all(h.startswith("results/drafters/toy/eagle/") for h in heads)
    monkeypatch.chdir(tmp_path)
    for folder in heads:
        Path(folder).mkdir(parents=True)
        record = {"kind": "eagle", "target": "toy:target", "training": {}, "sequences": 6}
        Path(folder, "training.json").write_text(json.dumps({**record, "seconds": 1.0}))
        curve = [{"step": 10, "loss": 1.0, "heldout_top1": 0.5}]
        write_table(
            pa.Table.from_pylist(curve, schema=HEAD_CURVES),
            Path(folder, "curves.parquet"),
            HEAD_CURVES,
        )
    write_table(pa.Table.from_pylist(CELL_ROWS, schema=CELLS), "cells.parquet", CELLS)
    args = ["report", "--cells", "cells.parquet", "--out", "index.html"]
    assert cli.main([*args, "--sweep", json.dumps(sweep)]) == 0
    page = Path("index.html").read_text(encoding="utf-8")
    assert "Training of the heads" in page
    assert all(page.count("/".join(Path(h).parts[-3:])) == 1 for h in heads)  # a row per head
