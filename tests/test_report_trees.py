"""Acceptance by draft position and the tree methods' sections (figures, step statistics)."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from report_pages import (
    HOSTILE,
    PAIR,
    figures,
    sections,
    trace_xy,
    tree_blocks,
    tree_cells,
    tree_table_rows,
    weights_page,
)

import mmspec.report.acceptance as report_acceptance
import mmspec.report.blocks as report_blocks
from mmspec.storage.tables import BLOCKS, write_table


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
