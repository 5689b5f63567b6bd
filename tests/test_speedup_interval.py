"""The speedup's bootstrap interval: covers 1 for AR against itself, excludes it for a real gain."""

from __future__ import annotations

import numpy as np

from mmspec.stages.aggregate import speedup_interval


def _timings(rng, n, factor):
    tokens = rng.integers(20, 64, n)
    per_token = rng.lognormal(np.log(1e-3), 0.1, n)  # samples differ in cost per token
    ar_s = tokens * per_token * rng.lognormal(0, 0.05, n)  # timing noise of each run
    s = tokens * per_token / factor * rng.lognormal(0, 0.05, n)
    return ar_s, tokens, s, tokens


def test_ar_against_itself_is_covered_in_about_95_percent_of_runs():
    rng = np.random.default_rng(7)
    covered = [
        low <= 1.0 <= high
        for low, high in (speedup_interval(*_timings(rng, 20, 1.0), seed=i) for i in range(200))
    ]
    assert 0.88 <= np.mean(covered) <= 0.99


def test_a_real_speedup_is_outside_the_noise_and_inside_its_interval():
    low, high = speedup_interval(*_timings(np.random.default_rng(3), 20, 1.3))
    assert 1.0 < low < 1.3 < high


def test_interval_is_deterministic_and_pools_like_the_speedup():
    ar_s, ar_tokens, s, tokens = [0.2, 0.4], [10, 20], [0.1, 0.2], [10, 20]
    assert speedup_interval(ar_s, ar_tokens, s, tokens) == (2.0, 2.0)
    timings = _timings(np.random.default_rng(5), 12, 1.1)
    assert speedup_interval(*timings) == speedup_interval(*timings)
