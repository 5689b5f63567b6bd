"""A sweep of 10 000 cells through the workflow's real aggregate and report rules.

The sweep (tests/scale_sweep.py: two toy datasets x 50 seeds x AR and SD at gamma 1..99) gets a
synthetic score table per cell, then Snakemake runs only `aggregate` and `report` on it
(`--allowed-rules`). Checked: the run prints (`-p`) no shell command over Linux's
128 KiB limit on one argument (MAX_ARG_STRLEN; Snakemake runs a command as one argument of
`bash -c`; the two commands used to list every score file and head folder), the cells table
holds every cell, and the report opens in Chromium with its seeds pooled, tables paged,
sortable and filterable, and a seed's row one click away. benchmarks/bench_sweep_report.py
measures the same sweep (and the whole sweep's dry run, which prints the same commands).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import scale_sweep
from test_report_browser import (
    Opened,
    cells_table,
    column,
    launched_chromium,
    n_figures,
    page_info,
)
from workflow_cli import ROOT, job_counts, snakemake_cmd

from mmspec.report.formatting import fmt_num

pytestmark = pytest.mark.slow

SEEDS = 50
MAX_ARG_STRLEN = 128 * 1024
TARGETS = ["results/summary/cells.parquet", "reports/index.html"]
RULES = ["aggregate", "claims", "report"]


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = snakemake_cmd(workdir, workdir / "sweep.yaml", *args)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> dict:
    """The sweep's workdir with a score table per cell and the run (`-p`) of aggregate and
    report on them."""
    workdir = tmp_path_factory.mktemp("sweep")
    scale_sweep.write_config(workdir / "sweep.yaml", SEEDS)
    cells = scale_sweep.write_scores(workdir, scale_sweep.sweep_config(SEEDS))
    # only these two rules, so that Snakemake neither plans nor explores the score files'
    # upstream; "--": the options before take several values each
    args = ["--printshellcmds", "--allowed-rules", *RULES, "--", *TARGETS]
    run = snakemake(workdir, *args)
    return {"workdir": workdir, "cells": cells, "run": run}


def test_the_sweep_has_10000_cells(sweep):
    assert len(sweep["cells"]) == SEEDS * scale_sweep.CELLS_PER_SEED == 10_000


def shell_commands(out: subprocess.CompletedProcess) -> list[str]:
    printed = (out.stdout + out.stderr).splitlines()
    return [line for line in printed if line.startswith("Shell command:")]


def test_no_shell_command_over_128_kib(sweep):
    out = sweep["run"]
    assert job_counts(out.stdout + out.stderr) == {"aggregate": 1, "claims": 1, "report": 1}
    commands = {c.split()[3]: c for c in shell_commands(out)}  # "Shell command: mmspec X"
    assert sorted(commands) == RULES
    # the two commands that took every score file and head folder: now a fixed size
    for stage in ("aggregate", "report"):
        command = commands[stage]
        assert "--sweep '" in command and "results/score/" not in command
        assert len(command.encode()) < 8 * 1024 < MAX_ARG_STRLEN, len(command)
    assert len(commands["claims"].encode()) < 8 * 1024


def test_only_the_summary_rules_ran(sweep):
    logs = sweep["workdir"] / "logs"
    assert sorted(p.name for p in logs.rglob("*")) == [f"{rule}.log" for rule in RULES]
    assert not (sweep["workdir"] / "results" / "generate").exists()


def test_cells_table_holds_every_cell(sweep):
    table = pq.read_table(sweep["workdir"] / "results/summary/cells.parquet").to_pandas()
    keys = set(zip(table["dataset"], table["method"], table["hp"], table["seed"], strict=True))
    assert len(table) == len(keys) == 10_000
    assert keys == {(c.dataset, c.method, c.hp, c.seed) for c in sweep["cells"]}
    blocks = pq.ParquetFile(sweep["workdir"] / "results/summary/blocks.parquet").metadata
    steps = table.loc[table["method"] != "ar", "steps"].sum()
    assert blocks.num_rows == steps  # a row per drafting step of every cell


@pytest.fixture(scope="module")
def report(sweep, browser):
    """The report, opened in Chromium, with the cells it was built from."""
    path = sweep["workdir"] / "reports" / "index.html"
    opened = Opened(browser, path)
    cells = pq.read_table(sweep["workdir"] / "results/summary/cells.parquet").to_pandas()
    print(f"report of 10 000 cells: {path.stat().st_size / 1e6:.1f} MB")
    yield opened, path, cells
    opened.page.close()


def test_report_renders_cleanly(report):
    opened, path, _ = report
    assert opened.problems(n_figures(path)) == []
    assert opened.requests == [path.as_uri()]
    headings = opened.page.locator("h2").all_inner_texts()
    assert headings[:4] == [
        "Reproduction: the papers' claims",
        "Pareto frontiers: speedup vs quality",
        "Cross-dataset summary",
        "Metric definitions",
    ]
    assert "10000 cells · 200 rows with their seeds pooled" in opened.page.content()


def test_report_pools_seeds_pages_sorts_and_filters(report):
    opened, _, cells = report
    box = cells_table(opened.page, "toy_caption · toy")
    # 100 pooled rows (AR and 99 gammas), 25 to a page
    assert page_info(box) == "rows 1–25 of 100 · page 1 of 4"
    assert column(box, "seeds") == ["50"] * 25
    of_dataset = cells[cells["dataset"] == "toy_caption"]
    # sorted by speedup (as shown), fastest first, over all four pages
    header = box.locator("th", has_text=re.compile(r"^speedup$"))
    header.click()
    header.click()
    means = of_dataset.groupby("hp")["speedup"].mean()
    shown = sorted((float(fmt_num(m)) for m in means), reverse=True)
    assert column(box, "hp")[0] == means.idxmax()
    box.locator("button.next").click()
    box.locator("button.next").click()
    assert page_info(box) == "rows 51–75 of 100 · page 3 of 4"
    assert [float(x) for x in column(box, "speedup")] == shown[50:75]
    assert column(box, "speedup") == [fmt_num(means[hp]) for hp in column(box, "hp")]
    # the filter finds a row on any page
    box.locator("input.filter").fill("gamma-42_")
    assert column(box, "hp") == ["gamma-42_views-M"]
    assert page_info(box) == "rows 1–1 of 1 (filtered from 100) · page 1 of 1"
    # its 50 seeds one click away, each with its own cell's numbers
    box.locator("tbody tr button.expand").click()
    of_hp = of_dataset[of_dataset["hp"] == "gamma-42_views-M"].sort_values("seed")
    assert column(box, "seeds", seeds=True) == [f"seed {s}" for s in range(SEEDS)]
    assert column(box, "tau", seeds=True) == [fmt_num(t) for t in of_hp["tau"]]
    assert column(box, "tau") == [fmt_num(of_hp["tau"].mean())]


def test_report_plots_pooled_points(report):
    opened, _, cells = report
    frontier = [p for p in opened.plots if p["title"] == "speedup vs quality"]
    assert len(frontier) == 2  # one per dataset
    # a point per method and hp (100 per dataset), not per cell (5 000)
    points = opened.page.evaluate(
        """() => Array.from(document.querySelectorAll(".plotly-graph-div"))
          .filter(gd => gd.layout.title.text === "speedup vs quality")
          .map(gd => gd._fullData.filter(t => t.name !== "Pareto front")
            .reduce((n, t) => n + t.x.length, 0))"""
    )
    per_dataset = [len(c[["method", "hp"]].drop_duplicates()) for _, c in cells.groupby("dataset")]
    assert points == per_dataset == [100, 100]


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as browser:
        yield browser
