"""Searched method entries: validation before any job, proposals as a pure function of the
search and its history, round files, shared cells and the hypervolume."""

from __future__ import annotations

import itertools
import json
import random
import warnings

import pytest
from base_config import base_config

from mmspec.schema import ConfigError
from mmspec.search import rounds as search_rounds
from mmspec.search.optimizer import Finished, point_key, propose
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep import search_runs
from mmspec.sweep.hypervolume import frontier, hypervolume
from mmspec.sweep.search_space import Constraint, Domain, Objective, Search


def searched(entry: dict, **grid) -> dict:
    methods = {"ar": {}, "s": {"method": "sd", **entry}}
    methods.update(grid)
    return base_config(methods=methods)


GOOD = {"gamma": {"low": 1, "high": 6}, "views": ["M", "T"], "search": {"budget": 6}}


def test_a_good_search_validates_and_has_no_grid_cells():
    config = mmconfig.validate(searched(GOOD))
    assert [c.method for c in mmcells.cells(config)] == ["ar"]
    (run,) = search_runs.runs(config)
    assert run.id == "dataset=toy_caption/pair=toy/method=s"
    assert run.search.grid_size() == 12 and run.search.rounds == 1
    # its corner cells stand for it in the checks: each view, both ends of gamma
    corners = {c.hp for c in search_runs.corner_cells(config)}
    assert corners == {"gamma-1_views-M", "gamma-1_views-T", "gamma-6_views-M"}


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"gamma": {"low": 0, "high": 6}}, "gamma must be >= 1"),
        ({"gamma": [0, 2]}, "gamma must be >= 1"),
        ({"gamma": {"low": 1.5, "high": 6.0}}, "gamma is an integer"),
        ({"views": {"low": 1, "high": 2}}, "categorical"),
        ({"gamma": {"low": 4, "high": 2}}, "low < high"),
        ({"gamma": {"low": 1, "high": 6, "spread": 2}}, "a range is {low, high}"),
        ({"gamma": [2, 2]}, "repeat a value"),
        ({"gamma": 3}, "at least one hyperparameter as a domain"),
        ({"gamma": {"low": 1, "high": 6}, "search": {"budget": 99}}, "more than the 6 points"),
        ({"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "per_round": 5}}, "per round"),
        (
            {"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "objectives": ["speed"]}},
            "'speed' is not a metric with a direction",
        ),
        (
            {"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "objectives": ["hp"]}},
            "not a metric",
        ),
        (
            {"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "constraints": ["tau > 2"]}},
            "a constraint reads",
        ),
        (
            {"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "constraints": ["taux >= 2"]}},
            "'taux' is not a numeric metric",
        ),
        ({"gamma": {"low": 1, "high": 6}, "lvspec_lambda": [0.1, 0.5]}, "lvspec_lambda"),
        ({"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "objectives": ["fid"]}},
         "'fid' is never measured on dataset 'toy_caption'"),
        ({"gamma": {"low": 1, "high": 6},
          "search": {"budget": 4, "constraints": ["judge_retention >= 0.9"]}},
         "measured on judged datasets only"),
        ({"gamma": {"low": 1, "high": 6}, "search": {"budget": 4, "sampler": "grid"}}, "sampler"),
    ],
)
def test_bad_searches_are_named_before_any_job(entry, words):
    entry = {"search": {"budget": 4}, **entry}
    with pytest.raises(ConfigError) as error:
        mmconfig.validate(searched(entry))
    assert "methods.s" in str(error.value)
    assert words in str(error.value)


def test_a_training_hyperparameter_is_not_searched():
    entry = {"method": "eagle", "head_lr": [0.001, 0.003], "gamma": {"low": 2, "high": 5}}
    config = base_config(methods={"ar": {}, "e": {**entry, "search": {"budget": 4}}})
    with pytest.raises(ConfigError, match=r"methods\.e\.head_lr: a training hyperparameter"):
        mmconfig.validate(config)


SPACE = (
    Domain("depth", low=1, high=10, integer=True),
    Domain("mode", choices=("a", "b")),
    Domain("tokens", low=4.0, high=64.0, log=True),
)


def toy_search(sampler="tpe", seed=0, budget=24, constraints=()):
    return Search(
        "x", "sd", {}, SPACE, (Objective("speedup"), Objective("quality")), constraints,
        budget, 8, seed, sampler,
    )  # fmt: skip


def measure(point):
    d, b, t = point["depth"], point["mode"] == "b", point["tokens"]
    speed = 1 + 0.3 * d - 0.02 * d * d + 0.2 * b - 0.001 * t
    quality = 1 - 0.01 * d - 0.05 * b + 0.0005 * t
    return {"speedup": speed, "speedup_low": speed - 0.05, "quality": quality, "retention": quality}


def run_rounds(search, rounds=None):
    history, by_round = [], []
    for number in range(1, (rounds or search.rounds) + 1):
        points = propose(search, number, history)
        history += [Finished(p, number, measure(p)) for p in points]
        by_round.append(points)
    return by_round


@pytest.mark.parametrize("sampler", ["tpe", "nsga2", "random"])
def test_proposals_are_a_function_of_search_round_and_history(sampler):
    first = run_rounds(toy_search(sampler))
    assert run_rounds(toy_search(sampler)) == first  # a rerun, or a resumed run
    keys = [point_key(p) for p in itertools.chain(*first)]
    assert len(keys) == 24 and len(set(keys)) == 24  # nothing decoded twice
    assert run_rounds(toy_search(sampler, seed=1)) != first
    # a larger budget adds rounds and changes none of the earlier
    assert run_rounds(toy_search(sampler, budget=40))[:3] == first
    for point in itertools.chain(*first):
        assert isinstance(point["depth"], int) and 1 <= point["depth"] <= 10
        assert point["mode"] in ("a", "b") and 4.0 <= point["tokens"] <= 64.0


def test_gp_rounds_are_reproducible_and_new():
    """Optuna's GP sampler (logEHVI), on a smaller search: it fits a GP per objective each ask."""

    def gp(seed, constraints=()):
        search = Search(
            "x", "sd", {}, SPACE, (Objective("speedup"), Objective("quality")), constraints, 8,
            4, seed, "gp",
        )  # fmt: skip
        return run_rounds(search)

    first = gp(0)
    assert gp(0) == first
    assert len({point_key(p) for p in itertools.chain(*first)}) == 8
    assert gp(1)[1] != first[1]
    # with a constraint the trials carry (as TPE and NSGA-II read it), and no warning about it
    limit = (Constraint("retention", ">=", 0.97),)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        constrained = gp(0, limit)
    assert constrained == gp(0, limit) and constrained[0] == first[0]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_tpe_rounds_cover_more_of_the_frontier_than_random_points(seed):
    """On a smooth two-objective toy, TPE's 32 points dominate more than the median of ten
    random 32-point searches (NSGA-II needs more generations than 3 rounds give it)."""

    def covered(points):
        measured = [(measure(p)["speedup"], measure(p)["quality"]) for p in points]
        return hypervolume(measured, (1.0, 0.85))

    tpe = covered(itertools.chain(*run_rounds(toy_search("tpe", seed=seed, budget=32))))
    randoms = [
        covered(itertools.chain(*run_rounds(toy_search("random", seed=100 + i, budget=32))))
        for i in range(10)
    ]
    assert tpe > sorted(randoms)[5]


def test_constraints_steer_the_search():
    limit = Constraint("retention", ">=", 0.97)
    by_round = run_rounds(toy_search("tpe", budget=32, constraints=(limit,)))
    feasible = lambda pts: sum(limit.slack(measure(p)) <= 0 for p in pts) / len(pts)  # noqa: E731
    assert feasible(by_round[-1]) >= feasible(by_round[0])


def test_a_finite_space_is_spent_without_repeats():
    space = (Domain("gamma", low=1, high=3, integer=True), Domain("views", choices=("M", "T")))
    search = Search("x", "sd", {}, space, (Objective("speedup"),), (), 6, 4, 0, "tpe")
    history = []
    for number in (1, 2):
        points = propose(search, number, history)
        history += [Finished(p, number, {"speedup": p["gamma"]}) for p in points]
    assert sorted(point_key(h.point) for h in history) == sorted(
        point_key({"gamma": g, "views": v}) for g in (1, 2, 3) for v in "MT"
    )


def test_hypervolume_matches_counting_on_a_lattice():
    rng = random.Random(0)
    for dims in (2, 3):
        points = [tuple(rng.randint(1, 6) for _ in range(dims)) for _ in range(12)]
        ref = (0,) * dims
        # unit cells of the lattice dominated by some point
        count = sum(
            any(all(c < p for c, p in zip(cell, point, strict=True)) for point in points)
            for cell in itertools.product(range(6), repeat=dims)
        )
        assert hypervolume(points, ref) == pytest.approx(count)
    assert hypervolume([(2, 1), (1, 2)], (3, 3)) == 0.0  # nothing beyond the reference
    assert frontier([(1, 1), (2, 2), (2, 1)]) == [(2.0, 2.0)]


def test_round_files_name_their_cells_and_share_grid_cells(tmp_path):
    grid = {"sd": {"gamma": [1, 2], "views": "M"}}
    config = mmconfig.validate(searched(GOOD, **grid))
    static = mmcells.cells(config)
    batch_of = mmcells_batch_of(config, static)
    (run,) = search_runs.runs(config)
    results = tmp_path / "results"
    points = [{"gamma": 2, "views": "M"}, {"gamma": 5, "views": "T"}]
    search_rounds.write_round(run, 1, points, [], run.round_path(1, str(results)))
    rounds = search_rounds.Rounds(config, static, batch_of, results=str(results))
    found = rounds.round(run.id, 1)
    assert [c.path for c in found.cells] == [
        "dataset=toy_caption/pair=toy/method=sd/hp=gamma-2_views-M/seed=0",  # the grid's cell
        "dataset=toy_caption/pair=toy/method=s/hp=gamma-5_views-T/seed=0",
    ]
    (own,) = found.batches["generate"]
    assert own == "dataset=toy_caption/pair=toy/method=s/seed=0/round-1-part-0"
    assert found.score_records == [
        f"results/batches/score/{batch_of[found.cells[0].path]}/done.json",
        f"results/batches/score/{own}/done.json",
    ]
    # a file proposed under another definition does not count (it is proposed again)
    other = mmconfig.validate(searched({**GOOD, "search": {"budget": 6, "seed": 1}}, **grid))
    assert search_rounds.Rounds(other, static, batch_of, str(results)).proposed() == []
    data = json.loads((results / "search" / run.id / "round-1.json").read_text())
    assert data["size"] == 6 and data["points"] == points


def mmcells_batch_of(config, cells):
    from mmspec.workflow import batches

    return batches.partition(cells, config["batch_cells"])


def test_the_report_shows_rounds_hypervolume_and_the_best_setting():
    import pandas as pd

    from mmspec.report import searches

    rows = [  # hp, speedup, quality, retention
        ("a", 1.2, 0.99, 0.99), ("b", 1.5, 0.95, 0.95), ("c", 2.0, 0.90, 0.90),
        ("d", 1.8, 0.995, 0.995),
    ]  # fmt: skip
    pooled = pd.DataFrame(
        [
            {"dataset": "d", "pair": "p", "method": "s", "hp": hp, "speedup": s,
             "speedup_low": s - 0.1, "speedup_high": s + 0.1, "quality": q, "retention": r,
             "tau": 2.0}
            for hp, s, q, r in rows
        ]
    )  # fmt: skip
    first, second = [({"g": 1}, "s", "a"), ({"g": 2}, "s", "b")], [({"g": 3}, "s", "c")]
    second.append(({"g": 4}, "s", "d"))
    search = searches.SearchRounds("d", "p", "s", ["speedup", "quality"], [], [first, second])
    html = searches.render(pooled, [search])
    assert "s on d, pair p" in html
    # round 1's frontier (a, b) covers less than the final (b, c, d dominate a)
    shares = searches.hypervolume_shares(searches.point_rows(pooled, search), search)
    assert 0 < shares[0] < shares[1] == 1.0
    # the fastest point keeping 99% of AR's quality is d, found in round 2
    assert "fastest with retention &gt;= 0.99: <code>{&#34;g&#34;: 4}</code> (round 2)" in html
    assert searches.render(pooled, []) == ""
