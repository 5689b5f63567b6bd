"""The retention's bootstrap interval: paired with AR, it is [1, 1] for AR's own answers, covers
the true retention about 95% of the time, and skips unpaired sample-turns (the cells table's
columns: tests/test_aggregate.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmspec.stages.aggregate import retention_interval


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
