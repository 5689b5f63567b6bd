"""The HTML report in a real browser: headless Chromium, driven by Playwright.

The page is built by the report stage (`mmspec report --cells --blocks --out`, the command of the
workflow's `report` rule) from cells and blocks tables that give every section of the page
something to show, with HTML in a dataset name; the end-to-end run's own report (the session
fixture `tiny_run`, shared with test_workflow.py) is checked as well.

In the browser: no JavaScript error, console error or dialog, no request but the page itself
(file:// or data:; any other request is recorded and aborted), every plot drew a mark for each of
its traces, the method tables page, sort on a header click and filter on typing (over every row,
not the page's), each pooled row's seeds show under it on a click, and the data's strings show
as text, not markup. A copy of the page with deliberate faults shows that each check can
fail. A full-page screenshot is kept under reports/browser-test/ (git-ignored;
MMSPEC_BROWSER_ARTIFACTS overrides the folder).

Chromium is Debian's `chromium` package (Playwright's own browser download is not used): as root,
a missing one is installed with apt (tests/browser/install_chromium.sh, as the Slurm test does);
as another user without it, the tests are skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from playwright.sync_api import sync_playwright
from report_pages import (
    CELL_ROWS,
    HOSTILE,
    PAIR,
    block_rows,
    cell,
    grid_cell,
    tree_blocks,
    tree_cells,
)

from mmspec import cli
from mmspec.claims.checks import VERDICTS
from mmspec.report.formatting import fmt_num
from mmspec.storage.tables import BLOCKS, write_table
from mmspec.sweep.cell_metrics import CELLS

REPO = Path(__file__).resolve().parents[1]
INSTALL_SCRIPT = REPO / "tests" / "browser" / "install_chromium.sh"
ARTIFACTS = Path(os.environ.get("MMSPEC_BROWSER_ARTIFACTS", REPO / "reports" / "browser-test"))
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
# A dataset name that would add an element and run a script if it reached the page as HTML.
HOSTILE_DATASET = 'd1 <b class="injected">it\'s bold</b><script>window.injected = 1</script>'
CHARTQA = f"chartqa · {PAIR}"
# A dataset of 30 hyperparameters x 3 seeds: more rows than a table's page, seeds to pool.
SWEEP = f"sweep · {PAIR}"
SWEEP_GAMMAS, SWEEP_SEEDS = range(1, 31), range(3)
LOCAL = ("file:", "data:")  # the only URLs the page may request


def find_chromium() -> str | None:
    found = (shutil.which(name) for name in BROWSER_NAMES)
    return next((path for path in found if path), None)


def chromium_path() -> str:
    """The Chromium executable; installed with apt when missing and running as root."""
    path = find_chromium()
    if path:
        return path
    if os.geteuid() != 0:
        pytest.skip("no chromium, and installing it needs root (CI runs the suite as root)")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True)
    print(proc.stdout)
    assert proc.returncode == 0, f"install_chromium.sh failed:\n{proc.stdout}\n{proc.stderr}"
    print(f"chromium installed in {time.monotonic() - t0:.1f}s")
    path = find_chromium()
    assert path, "install_chromium.sh succeeded but no chromium is on PATH"
    return path


@contextmanager
def launched_chromium() -> Iterator:
    """Headless Chromium under Playwright, closed on leaving."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path())
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser():
    with launched_chromium() as browser:
        yield browser


def sweep_tau(gamma: int, seed: int) -> float:
    return 1 + gamma / 10 + seed / 100


def sweep_cells() -> list[dict]:
    """The "sweep" dataset: SD at gamma 1..30, each over three seeds, and its AR cells."""
    return [
        cell(
            dataset="sweep",
            hp=f"g{gamma}",
            gamma=gamma,
            seed=seed,
            tau=sweep_tau(gamma, seed),
            speedup=1 + gamma / 20 + seed / 50,
            lossless_rate=0.5 if (gamma, seed) == (7, 1) else 1.0,  # one seed diverged
        )
        for gamma in SWEEP_GAMMAS
        for seed in SWEEP_SEEDS
    ]


def report_tables() -> tuple[list[dict], list[dict]]:
    """Cells and blocks rows for every section: the page tests' cells, tree methods, an ensemble
    with weights, a dataset of many rows and seeds; the dataset "d1" renamed to
    HOSTILE_DATASET."""
    trees = tree_cells()
    tabed = [grid_cell("TABED^MT", "MT", d, 2.5, hp="tabed-g4") for d in ("d1", "d2")]
    cells = CELL_ROWS + trees + tabed + sweep_cells()
    blocks = tree_blocks(trees) + [r for c in tabed for r in block_rows(c, ["s0", "s1"])]

    def rename(row: dict) -> dict:
        return {**row, "dataset": HOSTILE_DATASET if row["dataset"] == "d1" else row["dataset"]}

    return [rename(r) for r in cells], [rename(r) for r in blocks]


@pytest.fixture(scope="module")
def report_html(tmp_path_factory) -> Path:
    """reports/index.html as the workflow's report rule writes it, from `report_tables`."""
    tmp = tmp_path_factory.mktemp("browser")
    cells_rows, blocks_rows = report_tables()
    cells, blocks = tmp / "cells.parquet", tmp / "blocks.parquet"
    write_table(pa.Table.from_pylist(cells_rows, schema=CELLS), cells, CELLS)
    write_table(pa.Table.from_pylist(blocks_rows, schema=BLOCKS), blocks, BLOCKS)
    out = tmp / "reports" / "index.html"
    args = ["report", "--cells", str(cells), "--blocks", str(blocks), "--out", str(out)]
    assert cli.main(args) == 0
    return out


# ---- the checker -----------------------------------------------------------------------------

# Per plot: its title, its visible traces, how many of them drew a marker, bar or line, and the
# number of markers and bars drawn.
PLOTS_JS = """() => Array.from(document.querySelectorAll(".plotly-graph-div")).map(gd => {
  const drew = g => g.querySelector(".point") !== null || Array.from(
    g.querySelectorAll("path.js-line")).some(p => (p.getAttribute("d") || "").length > 2);
  const traces = Array.from(gd.querySelectorAll(".scatterlayer .trace, .barlayer .trace"));
  return {
    title: gd.layout && gd.layout.title ? gd.layout.title.text : "",
    plotted: gd.classList.contains("js-plotly-plot") && gd._fullData !== undefined,
    traces: (gd._fullData || []).filter(t => t.visible === true).length,
    drawn: traces.filter(drew).length,
    marks: gd.querySelectorAll(".scatterlayer .point, .barlayer .point").length,
  };
})"""


class Opened:
    """A page opened in the browser, with what it logged and requested while loading."""

    def __init__(self, browser, path: Path):
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        self.page.on("dialog", self._dialog)  # alert(): data run as script
        self.page.route("**/*", self._route)
        self.page.goto(path.as_uri(), wait_until="load")
        # plotly draws in the scripts the page runs while loading; two frames let it settle
        self.page.evaluate(
            "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
        )
        self.plots: list[dict] = self.page.evaluate(PLOTS_JS)

    def _console(self, message) -> None:
        if message.type in ("error", "assert"):
            self.errors.append(f"console {message.type}: {message.text}")

    def _dialog(self, dialog) -> None:
        self.errors.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def _route(self, route) -> None:
        self.requests.append(route.request.url)
        if route.request.url.startswith(LOCAL):
            route.continue_()
        else:
            route.abort()  # the page must not need it, and the test must not reach out

    def problems(self, n_plots: int) -> list[str]:
        """What is wrong with the page: errors, outside requests, plots that drew nothing."""
        found = list(self.errors)
        found += [f"request: {url}" for url in self.requests if not url.startswith(LOCAL)]
        if len(self.plots) != n_plots:
            found.append(f"{len(self.plots)} plot divs, {n_plots} figures in the page")
        for plot in self.plots:
            if not plot["plotted"] or plot["marks"] == 0 or plot["drawn"] < plot["traces"]:
                found.append(f"plot not drawn: {plot}")
        return found


def n_figures(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("Plotly.newPlot(")


def cells_table(page, section: str):
    """The method table box (filter, table and pager) of a section, by its heading text."""
    heading = page.locator("h2", has_text=section)
    return heading.locator("xpath=following-sibling::div[@class='data-table'][1]")


def column(box, name: str, seeds: bool = False) -> list[str]:
    """The texts of a table column as drawn, top to bottom: the pooled rows of the page shown
    (with `seeds`, the seeds' rows only)."""
    return box.evaluate(
        """(box, [name, seeds]) => {
          const table = box.querySelector("table");
          const i = Array.from(table.tHead.rows[0].cells).findIndex(c => c.textContent === name);
          return Array.from(table.tBodies[0].rows)
            .filter(r => r.classList.contains("sub-row") === seeds)
            .map(r => r.cells[i].textContent);
        }""",
        [name, seeds],
    )


def as_number(text: str) -> float:
    return float("inf") if text == "–" else float(text)


# ---- the page --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def opened(browser, report_html):
    opened = Opened(browser, report_html)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    opened.page.screenshot(path=shot, full_page=True)
    print(f"screenshot of the report: {shot}")
    yield opened
    opened.page.close()


@pytest.fixture
def page(browser, report_html):
    """A fresh tab on the report, for tests that click and type."""
    opened = Opened(browser, report_html)
    yield opened.page
    opened.page.close()


def test_no_errors_no_requests_every_plot_drawn(opened, report_html):
    assert opened.problems(n_figures(report_html)) == []
    assert opened.requests == [report_html.as_uri()]
    titles = [plot["title"] for plot in opened.plots]
    # every kind of figure is there: sections, acceptance, trees, weights
    for kind in (
        "speedup vs quality",
        "tau vs gamma",
        "acceptance by draft position",
        "tau vs mean tree size",
        "TABED",
    ):
        assert any(kind in title for title in titles), (kind, titles)


def test_the_end_to_end_runs_report_renders_cleanly(browser, tiny_run):
    """The report the workflow wrote in the tiny end-to-end run: no errors, no requests, every
    plot drawn."""
    report = tiny_run / "reports" / "index.html"
    opened = Opened(browser, report)
    try:
        assert opened.problems(n_figures(report)) == []
        assert opened.requests == [report.as_uri()]
        # the reproduction scorecard comes first, with a verdict for every claim
        assert opened.page.locator("h2").first.inner_text() == "Reproduction: the papers' claims"
        verdicts = opened.page.locator("table.claims .verdict").all_inner_texts()
        assert len(verdicts) >= 20 and set(verdicts) <= set(VERDICTS)
    finally:
        opened.page.close()


def test_dataset_text_escaped(opened):
    page = opened.page
    assert page.evaluate("() => document.querySelector('.injected') === null")
    assert page.evaluate("() => window.injected === undefined")
    headings = page.locator("h2").all_inner_texts()
    assert f"{HOSTILE_DATASET} · {PAIR}" in headings
    # plotly shows its titles as SVG text: the name is there as text, not as bold markup
    titles = page.locator(".plotly-graph-div .gtitle").all_text_contents()
    assert any(t.startswith(HOSTILE_DATASET) for t in titles), titles


def test_cells_table_sorts_on_header_click(page):
    box = cells_table(page, CHARTQA)
    before = column(box, "speedup")
    pairs_before = set(zip(column(box, "hp"), before, strict=True))
    header = box.locator("th", has_text=re.compile(r"^speedup$"))
    header.click()
    ascending = column(box, "speedup")
    assert ascending != before
    assert ascending == sorted(before, key=as_number)
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    descending = column(box, "speedup")
    assert [as_number(x) for x in descending] == sorted(map(as_number, before), reverse=True)
    # whole rows move: each hp keeps its speedup
    assert set(zip(column(box, "hp"), descending, strict=True)) == pairs_before
    box.locator("th", has_text=re.compile(r"^hp$")).click()
    hps = column(box, "hp")
    assert hps == sorted(hps, key=str.lower) and hps != sorted(hps, key=str.lower, reverse=True)


def test_cells_table_filters_on_typing(page):
    box = cells_table(page, CHARTQA)
    everything = column(box, "hp")
    box.locator("input.filter").press_sequentially("G4")
    shown = column(box, "hp")
    assert shown == [hp for hp in everything if "g4" in hp]  # case-insensitive
    assert 0 < len(shown) < len(everything)
    box.locator("input.filter").fill("")
    assert column(box, "hp") == everything


def page_info(box) -> str:
    return box.locator(".page-info").text_content()


def test_cells_table_pages_sorts_and_filters_every_row(page):
    box = cells_table(page, SWEEP)
    # one row per hp (the seeds pooled), 25 to a page, in table order (gamma as a number)
    assert column(box, "hp") == [f"g{g}" for g in range(1, 26)]
    assert page_info(box) == "rows 1–25 of 30 · page 1 of 2"
    assert box.locator("button.prev").is_disabled()
    box.locator("button.next").click()
    assert column(box, "hp") == [f"g{g}" for g in range(26, 31)]
    assert page_info(box) == "rows 26–30 of 30 · page 2 of 2"
    assert box.locator("button.next").is_disabled()
    # sorting sorts every row, not the page's: back to page 1, the fastest (from page 2) first
    header = box.locator("th", has_text=re.compile(r"^speedup$"))
    header.click()
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert column(box, "hp")[:3] == ["g30", "g29", "g28"]
    assert page_info(box).startswith("rows 1–25 of 30")
    # and the filter looks at every row too
    box.locator("input.filter").fill("g1")
    shown = column(box, "hp")
    assert sorted(shown) == sorted(["g1", *(f"g{g}" for g in range(10, 20))])
    assert page_info(box) == "rows 1–11 of 11 (filtered from 30) · page 1 of 1"


def test_seed_rows_are_one_click_away(page):
    box = cells_table(page, SWEEP)
    first = box.locator("tbody tr").first
    # the pooled row: the mean over its three seeds
    assert column(box, "seeds")[0] == "3"
    assert column(box, "tau")[0] == fmt_num(sum(sweep_tau(1, s) for s in SWEEP_SEEDS) / 3)
    assert column(box, "tau", seeds=True) == []
    first.locator("button.expand").click()
    assert column(box, "seeds", seeds=True) == [f"seed {s}" for s in SWEEP_SEEDS]
    assert column(box, "tau", seeds=True) == [fmt_num(sweep_tau(1, s)) for s in SWEEP_SEEDS]
    assert len(column(box, "hp")) == 25  # the page keeps its rows
    # gamma 7's second seed diverged: its row is red, and so is the pooled row (mean < 1)
    box.locator("input.filter").fill("g7")
    row = box.locator("tbody tr").first
    assert "bug" in row.get_attribute("class")
    row.locator("button.expand").click()
    seeds = box.locator("tbody tr.sub-row")
    assert [seeds.nth(i).get_attribute("class") for i in range(3)] == [
        "sub-row",
        "bug sub-row",
        "sub-row",
    ]
    box.locator("tbody tr").first.locator("button.expand").click()
    assert column(box, "tau", seeds=True) == []


def test_table_strings_are_text(opened):
    page = opened.page
    box = cells_table(page, CHARTQA)
    assert HOSTILE in column(box, "hp")  # drawn as text, run as nothing (no dialog: no error)
    assert opened.errors == []
    # a paper's label drawn with its superscript
    d2 = cells_table(page, f"d2 · {PAIR}")
    assert d2.locator("tbody td sup", has_text="MT").count() >= 1


# ---- the checker fails on a broken page ------------------------------------------------------

FAULTS = {
    "javascript error": ("<script>undefinedFunction()</script>", "undefinedFunction"),
    "console error": ("<script>console.error('deliberate')</script>", "deliberate"),
    "network request": ("<img src='https://example.invalid/x.png'>", "example.invalid"),
    "data run as script": ("<script>alert('deliberate')</script>", "dialog: deliberate"),
    "empty plot": (
        "<script>Plotly.react(document.querySelector('.plotly-graph-div'), "
        "[{x: [], y: [], type: 'scatter'}], {})</script>",
        "plot not drawn",
    ),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_checker_fails_on_broken_page(browser, report_html, tmp_path, fault):
    markup, expected = FAULTS[fault]
    broken = tmp_path / "index.html"
    page = report_html.read_text(encoding="utf-8")
    broken.write_text(page.replace("</body>", f"{markup}\n</body>"), encoding="utf-8")
    opened = Opened(browser, broken)
    try:
        problems = opened.problems(n_figures(report_html))
    finally:
        opened.page.close()
    assert any(expected in problem for problem in problems), problems
