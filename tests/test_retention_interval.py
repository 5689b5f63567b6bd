"""The retention's bootstrap interval: paired with AR, it is [1, 1] for AR's own answers, covers
the true retention about 95% of the time, skips unpaired sample-turns, and reaches the cells
table for the task metric and the judge alike."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from mmspec.stages import aggregate
from mmspec.stages.aggregate import retention_interval
from mmspec.tables import CELLS, SCORES, read_table, write_table


def test_answers_equal_to_ar_have_a_point_interval_however_the_samples_differ():
    ar = np.random.default_rng(0).uniform(0.2, 1.0, 40)  # easy and hard samples
    assert retention_interval(ar, ar) == pytest.approx((1.0, 1.0))


def test_interval_covers_the_true_retention_in_about_95_percent_of_sets():
    rng = np.random.default_rng(11)
    covered = []
    for i in range(200):
        ar = rng.uniform(0.5, 1.0, 60)
        lost = rng.random(60) < 0.1  # a tenth of the answers lose a fifth of their quality
        quality = np.where(lost, ar * 0.8, ar)
        low, high = retention_interval(quality, ar, seed=i)
        covered.append(low <= 1 - 0.1 * 0.2 <= high)  # E[q] / E[ar]: `lost` is independent
    assert 0.88 <= np.mean(covered) <= 0.99


def test_pairing_narrows_the_interval_against_shuffled_ar_answers():
    rng = np.random.default_rng(2)
    ar = rng.uniform(0.2, 1.0, 80)
    quality = ar * rng.uniform(0.95, 1.0, 80)
    low, high = retention_interval(quality, ar)
    shuffled_low, shuffled_high = retention_interval(quality, rng.permutation(ar))
    assert low < quality.mean() / ar.mean() < high
    assert high - low < (shuffled_high - shuffled_low) / 3


def test_unpaired_sample_turns_are_left_out_and_none_paired_is_nan():
    assert retention_interval([1.0, None, 0.5], [1.0, 0.7, None]) == pytest.approx((1.0, 1.0))
    low, high = retention_interval([None, 0.5], [1.0, None])
    assert math.isnan(low) and math.isnan(high)


def _cell(tmp_path, method, quality, ar_quality, judge, ar_judge):
    rows = [
        {
            "dataset": "toy_vdesc",
            "pair": "p",
            "method": method,
            "hp": "default",
            "hparams": "{}",
            "seed": 0,
            "registry_method": method,
            "sample_id": f"s{i}",
            "turn": 0,
            "steps": 5,
            "new_tokens": 10,
            "decode_s": 1.0,
            "ar_decode_s": 2.0,
            "ar_n_tokens": 11,
            "quality": q,
            "ar_quality": a,
            "judge_score": j,
            "ar_judge_score": aj,
            "judge_error": None if j is not None else "HTTP 500",
        }
        for i, (q, a, j, aj) in enumerate(zip(quality, ar_quality, judge, ar_judge, strict=True))
    ]
    path = tmp_path / f"{method}.parquet"
    write_table(pa.Table.from_pylist(rows, schema=SCORES), path, SCORES)
    return str(path)


def test_cells_table_has_both_retentions_intervals(tmp_path):
    quality, ar_quality = [1.0, 0.5, 0.8, 0.9], [1.0, 1.0, 0.8, 1.0]
    judge, ar_judge = [5.0, None, 3.0, 4.0], [5.0, 4.0, 4.0, 4.0]
    loose = _cell(tmp_path, "loose", quality, ar_quality, judge, ar_judge)
    out = tmp_path / "cells.parquet"
    aggregate.run([loose], str(out), str(tmp_path / "blocks.parquet"))
    (cell,) = read_table(out, CELLS).to_pylist()
    assert (cell["retention_low"], cell["retention_high"]) == pytest.approx(
        retention_interval(quality, ar_quality)
    )
    assert cell["retention_low"] < cell["retention"] < cell["retention_high"]
    # the failed judgement is left out of the interval as of the retention itself
    assert cell["judge_retention"] == pytest.approx(12 / 13)
    low, high = retention_interval(judge, ar_judge)
    assert (cell["judge_retention_low"], cell["judge_retention_high"]) == pytest.approx((low, high))
    assert low < 12 / 13 <= high
