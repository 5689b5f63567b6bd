"""The lossy-verification section: retention against speedup, its frontier and retention table."""

from __future__ import annotations

import re

import pandas as pd
import pyarrow as pa
import pytest
from report_pages import CELLS, loose_rows, page_of, sections, write_table

import mmspec.report.loose as report_loose
from mmspec.stages import report as report_stage
from mmspec.sweep import config as mmconfig


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


def test_a_datasets_note_shows_under_its_headings_escaped(tmp_path):
    """The tour's toy_video says why its LVSpec cell cannot show LVSpec's premise: the config
    entry's `note` reaches the report stage through the sweep, under the dataset's section and
    its loose-verification plot, escaped; a dataset without one shows none."""
    sweep = mmconfig.load("config/config.yaml")
    sweep["datasets"]["toy_video"]["note"] += " <b>&</b>"
    rows = [{**row, "dataset": "toy_video"} for row in loose_rows()]
    rows += [{**row, "dataset": "vdd"} for row in loose_rows()]
    cells = tmp_path / "cells.parquet"
    write_table(pa.Table.from_pylist(rows, schema=CELLS), cells, CELLS)
    report_stage.run(str(cells), str(tmp_path / "report.html"), sweep=sweep)
    found = sections((tmp_path / "report.html").read_text(encoding="utf-8"))
    note = "<b>Note on toy_video:</b> LVSpec relaxes the drafted positions"
    video = next(v for k, v in found.items() if k.startswith("toy_video"))
    assert note in video and "&lt;b&gt;&amp;&lt;/b&gt;" in video
    assert next(v for k, v in found.items() if k.startswith("vdd")).count("Note on") == 0
    loose = found["Loose verification: retention vs speedup"]
    assert loose.count(note) == 1 and loose.count("Note on") == 1
