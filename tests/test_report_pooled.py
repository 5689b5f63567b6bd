"""Seeds pooled: means, t intervals, each seed's row a click away."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from report_pages import (
    PAIR,
    SEEDS,
    T_TWO_DF,
    cell,
    page_of,
    sections,
    seeds_rows,
    t_interval,
    table_data,
)

import mmspec.report.pooled as pooled
from mmspec.report.cells import with_labels
from mmspec.report.formatting import fmt_num


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
