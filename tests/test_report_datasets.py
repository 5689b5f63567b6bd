"""Per-dataset accepted length (TABED's table) and block efficiency marks."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest
from report_pages import PAIR, cell, grid_cell, grid_rows, page_of, sections, table_rows

from mmspec.report.block_efficiency import tau_by_dataset
from mmspec.report.cells import with_labels


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


def test_an_entry_that_runs_ar_under_another_name_is_left_out():
    """`ar_t1: {method: ar, temperature: 1}` is the AR baseline by its registry method."""
    rows = grid_rows() + [
        grid_cell("ar_t1", "M", d, 1.0, method="ar_t1", registry_method="ar")
        for d in ("d1", "d2", "d3")
    ]
    assert list(tau_by_dataset(with_labels(pd.DataFrame(rows))).index) == ["M", "T", "TABED^MT"]


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


def test_a_label_with_several_settings_is_told_apart_by_the_keys_that_differ():
    """Hashed hp slugs hide the setting that varies; the row names it instead."""
    rows = grid_rows()
    for mask, hp in (
        ("merged", "lantern_k-16_lantern_-539201ef"),
        ("release", "lantern_-5f0b797e"),
    ):
        params = {"lantern_k": 16, "lantern_delta": 0.2, "lantern_sibling_mask": mask}
        rows.append(grid_cell("L", "M", "d1", 2.0, hp=hp, hparams=json.dumps(params)))
    index = list(tau_by_dataset(with_labels(pd.DataFrame(rows))).index)
    assert "L · M · lantern_sibling_mask=merged" in index
    assert "L · M · lantern_sibling_mask=release" in index


def test_dreams_table_gives_a_grid_point_one_row_over_temperatures():
    """A `dream_loss: [release, paper]` grid greedy and sampled: two rows (one per loss), each
    with its T=0 and T=1 columns, named by the key that differs."""
    from mmspec.report.heads import table1

    rows = []
    for loss in ("release", "paper"):
        for temperature, rule in ((0.0, "greedy"), (1.0, "sampling")):
            entry = "my_dream" if temperature == 0 else "my_dream_t1"
            params = {"dream_loss": loss, "temperature": temperature, "acceptance": rule}
            rows.append(
                cell(
                    method=entry,
                    registry_method="dream",
                    label=None,
                    hp=f"h-{loss}-{temperature}",
                    hparams=json.dumps({**params, "method": entry}),
                    temperature=temperature,
                    acceptance=rule,
                    tree="dynamic",
                    tau=7.0 if loss == "release" else 6.0,
                )
            )
    html = table1(pd.DataFrame(rows))
    names = re.findall(r"<tr><td>(.*?)</td>", html)
    assert sorted(names) == ["DREAM · dream_loss=paper", "DREAM · dream_loss=release"]
