"""Builders and readers shared by the report tests (tests/test_report_*.py): cells tables of
made-up cells, pages written from them, and the page's sections and data tables read back."""

from __future__ import annotations

import json
import math
import re
from html import unescape as html_unescape
from pathlib import Path

import pyarrow as pa
import pytest

from mmspec.report.page import write_report
from mmspec.storage.tables import BLOCKS, write_table
from mmspec.sweep.cell_metrics import CELLS

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


@pytest.fixture(scope="session")
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


def all_rows(page: str) -> list[dict]:
    """The rows of every method table of a page (every dataset section's)."""
    return [
        row
        for heading, body in sections(page).items()
        if " · " in heading
        for row in table_data(body)
    ]


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


def tree_table_rows(section: str, pair: str) -> dict[str, list[str]]:
    """The <td> contents after the method name of each row of `pair`'s tree table."""
    return table_rows(section[section.index(f"<h3>{pair}</h3>") :])


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
