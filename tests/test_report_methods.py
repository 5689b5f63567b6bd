"""The report's method table: every cell, lossless flags, speedups, columns, sorting and
filtering."""

from __future__ import annotations

import re

from report_pages import (
    CELL_ROWS,
    PAIR,
    all_rows,
    ar_cell,
    cell,
    page_of,
    sections,
    table_data,
)

from mmspec.report import datatable


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


def test_greedy_non_lossless_cell_flagged(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    bad = [r for r in table_data(body) if r["text"]["hp"] == "g4-bad"]
    assert len(bad) == 1 and "bug" in bad[0]["class"].split()
    assert bad[0]["text"]["lossless_rate"] == "0.900"
    assert bad[0]["cls"]["lossless_rate"] == "bug-cell"
    assert "this is a bug" in body
    # and only that one: lossless greedy cells and sampling cells are not
    assert len([r for r in all_rows(report) if "bug" in r["class"].split()]) == 1
    assert "1 greedy cell(s) of a lossless rule with real divergences" in report


def test_near_ties_are_shown_and_only_real_divergences_are_bugs(tmp_path):
    """Both cells leave the AR cell's tokens on a sample-turn in ten; the one whose job found AR's
    margin there within rounding is no bug, the one with a real divergence is."""
    page = page_of(
        tmp_path,
        [
            ar_cell(),
            cell(hp="g4-ties", lossless_rate=0.9, near_tie_divergences=2, real_divergences=0),
            cell(hp="g4-real", lossless_rate=0.9, near_tie_divergences=0, real_divergences=1),
        ],
    )
    rows = {r["text"]["hp"]: r for r in table_data(sections(page)[f"chartqa · {PAIR}"])}
    assert "bug" not in rows["g4-ties"]["class"].split()
    assert rows["g4-ties"]["text"]["near_tie_divergences"] == "2"
    assert "bug" in rows["g4-real"]["class"].split()
    assert rows["g4-real"]["cls"]["real_divergences"] == "bug-cell"
    assert "1 greedy cell(s) of a lossless rule with real divergences" in page


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
    assert "1 greedy cell(s) of a lossless rule with real divergences" in page
    [alert] = re.findall(r"<p class='alert'>.*?</p>", body)
    assert "g4-lossless" in alert and "g4-lossy" not in alert


def test_lossless_rule_unknown_counts_as_lossless(tmp_path):
    page = page_of(tmp_path, [cell(lossless_rule=None, lossless_rate=0.5)])
    assert "1 greedy cell(s) of a lossless rule with real divergences" in page
    [row] = all_rows(page)
    assert "bug" in row["class"] and "lossy-cell" not in row["cls"].values()


def test_best_speedup_bold(report):
    body = sections(report)[f"chartqa · {PAIR}"]
    best = [r for r in table_data(body) if "best" in r["class"].split()]
    # g4-bad is faster (2.1) but leaves AR under a lossless rule: its speed is a bug's
    assert len(best) == 1 and best[0]["text"]["hp"] == "g4-t1"


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
