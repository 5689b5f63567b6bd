"""Tests of the HTML report: the Pareto helper, and a page built from a synthetic cells table."""

from __future__ import annotations

import json
import math
import re

import pyarrow as pa
import pytest
from plotly.offline import get_plotlyjs

from mmspec.report.html import fmt_num, pareto_front, write_report
from mmspec.tables import CELLS, write_table

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
        view="full",
        gamma=4,
        acceptance="greedy",
        temperature=0.0,
        n_samples=20,
        n_steps=400,
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
        view=None,
        gamma=None,
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
    cell(method="eagle", hp="g4-bad", gamma=4, tau=3.1, speedup=2.1, lossless_rate=0.9),
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
    """The HTML of each dataset x pair section, keyed by its heading text."""
    parts = re.split(r"<h2 id='(sec-\d+|summary)'>", page)
    found = {}
    for body in parts[2::2]:
        heading, _, rest = body.partition("</h2>")
        found[heading] = rest
    return found


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
    assert "tau / (gamma * c + 1)" in report


def test_section_per_dataset_and_pair(report):
    expected = sorted({(r["dataset"], r["pair"]) for r in CELL_ROWS})
    found = [h for h in sections(report) if " · " in h]
    assert found == [f"{d} · {p}" for d, p in expected]


def test_method_table_lists_every_cell(report):
    by_heading = sections(report)
    for dataset, pair in {(r["dataset"], r["pair"]) for r in CELL_ROWS}:
        body = by_heading[f"{dataset} · {pair}"]
        table = body[: body.index("</table>")]
        rows = [r for r in CELL_ROWS if (r["dataset"], r["pair"]) == (dataset, pair)]
        assert table.count("<tr") - 1 == len(rows)  # minus the header row
        for row in rows:
            hp = row["hp"].replace("<", "&lt;").replace(">", "&gt;")
            assert f">{hp}</td>" in table


def test_greedy_non_lossless_cell_flagged(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    bad = [tr for tr in re.findall(r"<tr[^>]*>.*?</tr>", body) if "g4-bad" in tr]
    assert len(bad) == 1 and "bug" in bad[0] and "0.900" in bad[0]
    assert "this is a bug" in body
    # and only that one: lossless greedy cells and sampling cells are not
    assert len(re.findall(r"<tr class='[^']*bug", report)) == 1
    assert "1 greedy cell(s) with lossless_rate" in report


def test_best_speedup_bold(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    best = re.findall(r"<tr class='[^']*best[^']*'>.*?</tr>", body)
    assert len(best) == 1 and "g4-bad" in best[0]


def test_data_strings_escaped(report):
    assert HOSTILE not in report
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in report


def test_degenerate_sections(report):
    only_ar = sections(report)[f"docvqa · {PAIR}"]
    assert "Not plotted: no cell has a gamma" in only_ar
    assert "–" in only_ar  # AR has no speedup_eq1


def test_cross_dataset_summary(report):
    summary = report[report.index("<h2 id='summary'>") :]
    assert f"<h3>tau · {PAIR}</h3>" in summary and f"<h3>speedup · {PAIR}</h3>" in summary
    assert "<th>chartqa</th><th>docvqa</th>" in summary


def test_empty_table(tmp_path):
    cells = tmp_path / "cells.parquet"
    write_table(CELLS.empty_table(), cells, CELLS)
    write_report(cells, tmp_path / "report.html")
    assert "0 cells" in (tmp_path / "report.html").read_text(encoding="utf-8")
