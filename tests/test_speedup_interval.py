"""The speedup and its bootstrap interval (stages/aggregate.py): the AR cell's time of every
sample-turn, scaled by the speed ratio of the job's own AR probes to the AR cell's on the same
steps. It is exactly 1 for AR against itself, recovers a known speedup whatever the job's machine
speed and drift, and its interval covers the truth about 95% of the time."""

from __future__ import annotations

import numpy as np
import pytest

from mmspec.stages.aggregate import ar_speed_ratio, speedup, speedup_interval

PROBE = 4  # probe steps of a sample-turn


def _cell(rng, n: int, true_speedup: float, machine: float, drift: float = 0.0, noise=0.05):
    """The lists the speedup reads for one cell: the AR cell timed on a machine of speed 1, the
    method's job on one `machine` times slower, its load drifting by +-`drift` over the job;
    every run's time off by lognormal `noise`."""
    tokens = rng.integers(20, 64, n).astype(float)
    per_token = rng.lognormal(np.log(1e-3), 0.2, n)  # samples differ in cost per token
    load = machine * (1 + drift * np.linspace(-1, 1, n))
    cell_s = tokens * per_token * rng.lognormal(0, noise, n)
    cell_probe = PROBE * per_token * rng.lognormal(0, noise, n)
    probe = PROBE * per_token * load * rng.lognormal(0, noise, n)
    method = tokens * per_token * load / true_speedup * rng.lognormal(0, noise, n)
    return list(probe), list(cell_probe), list(cell_s), list(tokens), list(method), list(tokens)


def test_the_ar_cell_against_itself_is_exactly_one():
    steps = [0.01, 0.012, 0.011]
    decode, tokens = [0.4, 0.5, 0.45], [30, 41, 35]
    lists = (steps, steps, decode, tokens, decode, tokens)
    assert speedup(*lists) == 1.0
    assert speedup_interval(*lists) == (1.0, 1.0)


def test_the_speedup_pools_the_ar_cells_times_scaled_by_the_probes():
    """Worked by hand: the job ran AR 1.5x slower than the AR cell (probes 0.03 + 0.06 s against
    0.02 + 0.04 s), so AR here takes 1.5 x (1.0 + 3.0) s / (50 + 150) tokens = 0.03 s a token;
    the method took (0.5 + 1.5) s / 200 tokens = 0.01 s: a speedup of 3."""
    lists = ([0.03, 0.06], [0.02, 0.04], [1.0, 3.0], [50, 150], [0.5, 1.5], [50, 150])
    assert ar_speed_ratio(*lists) == pytest.approx(1.5)
    assert speedup(*lists) == pytest.approx(3.0)
    assert speedup_interval(*lists) == speedup_interval(*lists)  # deterministic


@pytest.mark.parametrize("machine, drift", [(1.0, 0.0), (2.5, 0.0), (0.6, 0.3)])
def test_a_known_speedup_is_recovered_on_a_slower_or_faster_drifting_machine(machine, drift):
    rng = np.random.default_rng(11)
    estimates = [speedup(*_cell(rng, 20, 1.3, machine, drift)) for _ in range(100)]
    assert np.median(estimates) == pytest.approx(1.3, rel=0.03)
    # without the probes' ratio (the AR cell's times taken as this job's) it is off by `machine`
    naive = [speedup(*_cell(rng, 20, 1.3, machine, drift)) / machine for _ in range(100)]
    if machine != 1.0:
        assert abs(np.median(naive) - 1.3) > 0.25


@pytest.mark.parametrize("n, noise", [(12, 0.05), (20, 0.1)])
def test_the_interval_covers_the_true_speedup_in_about_95_percent_of_cells(n, noise):
    rng = np.random.default_rng(7)
    covered = []
    for i in range(200):
        low, high = speedup_interval(*_cell(rng, n, 1.3, 1.8, 0.1, noise), seed=i)
        covered.append(low <= 1.3 <= high)
    assert 0.88 <= np.mean(covered) <= 0.995


def test_a_cell_without_the_ar_cells_times_has_no_speedup():
    lists = ([0.01], [0.01], [None], [30], [0.2], [30])
    assert np.isnan(speedup(*lists)) and all(np.isnan(speedup_interval(*lists)))


def test_a_one_token_answer_adds_nothing_and_empty_totals_give_no_speedup():
    """A sample-turn the AR cell answered with one token has no steps to probe: it adds nothing
    to the ratio (and the point and the interval agree); a cell whose answers are all one token
    long has no time per token: NaN, not a ZeroDivisionError."""
    lists = ([0.03, None], [0.02, None], [1.0, 0.0], [50, 0], [0.5, 0.0], [50, 0])
    assert speedup(*lists) == pytest.approx(3.0)
    low, high = speedup_interval(*lists)
    assert low == pytest.approx(3.0) and high == pytest.approx(3.0)
    one_token = ([None], [None], [0.0], [0], [0.0], [0])
    assert np.isnan(speedup(*one_token)) and all(np.isnan(speedup_interval(*one_token)))
