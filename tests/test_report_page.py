"""The report page as a whole: self-contained, header, sections per dataset and pair, metric
definitions, escaping, the summary and frontiers first, the report command."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow as pa
from plotly.offline import get_plotlyjs
from report_pages import (
    CELL_ROWS,
    HOSTILE,
    PAIR,
    ROOT,
    SEEDS,
    ar_cell,
    block_rows,
    cell,
    data_tables,
    figures,
    grid_cell,
    page_of,
    sections,
    seeds_rows,
    t_interval,
    table_data,
    table_rows,
    trace_xy,
    weights_page,
)

from mmspec import cli
from mmspec.report.formatting import esc, fmt_num
from mmspec.report.pareto import pareto_front
from mmspec.stages import report as report_stage
from mmspec.storage.tables import HEAD_CURVES, write_table
from mmspec.sweep import config as mmconfig
from mmspec.sweep.cell_metrics import CELLS


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


def test_metric_definitions(report):
    assert "new_tokens / steps, pooled over the cell" in report
    assert "cut by a stop token or max_new_tokens is not counted" in report
    assert "emitted draft tokens / steps" in report
    assert "AR decode time per emitted token / method decode time per emitted token" in report
    assert "greedy and sampling alike" in report


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
    # g4's seed 1 left AR (lossless_rate 0.9, nothing classed a near tie): off the front
    assert trace_xy(traces, "Pareto front") == ([1.2], [0.75])
    [(columns, rows)] = data_tables(frontier)
    assert columns[:3] == ["on the front", "hp", "seeds"]
    assert [r["text"]["speedup"] for r in rows] == ["1.20"]
    # the pooled point off the front shows its mean and t interval where it is plotted
    low, high = t_interval([s for _, s, _ in SEEDS])
    mean = f"{fmt_num(sum(s for _, s, _ in SEEDS) / 3)} [{fmt_num(low)}, {fmt_num(high)}]"
    assert any(f"speedup {mean}" in text for t in traces for text in t.get("text") or [])
    # the summary's values: means over seeds, the interval in their tooltip
    summary = sections(page)["Cross-dataset summary"]
    tau_table = data_tables(summary)[0][1]
    g4 = next(r for r in tau_table if r["text"]["hp"] == "g4")
    assert g4["text"]["chartqa"] == fmt_num(sum(t for t, _, _ in SEEDS) / 3)
    assert g4["title"]["chartqa"].startswith("mean of 3 seeds; 95% t interval [")


def test_a_cell_with_real_divergences_is_off_the_front_and_the_run_says_so(tmp_path):
    """The fastest cell is a lossless rule's greedy cell that leaves AR beyond rounding: its
    speed is a bug's, so it is marked, not the front's best, and the run's last lines name it."""
    from mmspec.stages.claims import finished

    rows = [
        ar_cell(),
        cell(hp="g2", gamma=2, speedup=1.2, quality=0.75, real_divergences=0),
        cell(hp="g9-bug", gamma=9, speedup=3.0, quality=0.75, lossless_rate=0.5,
             near_tie_divergences=0, real_divergences=4),
    ]  # fmt: skip
    page = page_of(tmp_path, rows)
    frontier = sections(page)["Pareto frontiers: speedup vs quality"]
    [(_, traces)] = figures(frontier)
    assert trace_xy(traces, "Pareto front") == ([1.2], [0.75])
    bug = next(t for t in traces if t["name"] == "sps")
    symbols = dict(zip(bug["x"], bug["marker"]["symbol"], strict=True))
    assert symbols == {1.2: "circle", 3.0: "x"}
    assert any("left off the front" in text for text in bug["text"])
    table = {r["text"]["hp"]: r for r in table_data(sections(page)[f"chartqa · {PAIR}"])}
    assert "best" in table["g2"]["class"].split() and "best" not in table["g9-bug"]["class"]
    cells = tmp_path / "cells.parquet"
    write_table(pa.Table.from_pylist(rows, schema=CELLS), cells, CELLS)
    said = finished(tmp_path / "none.parquet", tmp_path / "none.html", cells)
    assert said.startswith("mmspec lossless: 1 greedy cell(s) of a lossless rule leave AR")
    assert "chartqa/" in said and "/g9-bug" in said
    rows[2]["real_divergences"] = 0  # near-ties only: nothing to say
    write_table(pa.Table.from_pylist(rows, schema=CELLS), cells, CELLS)
    assert finished(tmp_path / "none.parquet", tmp_path / "none.html", cells) == ""


def test_report_cli_finds_the_sweeps_heads(tmp_path, monkeypatch):
    sweep = mmconfig.validate(mmconfig.load_as_snakemake(ROOT / "tests/configs/tiny_heads.yaml"))
    heads = report_stage.sweep_head_folders(sweep)
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
