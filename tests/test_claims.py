"""The reproduction scorecard (src/mmspec/claims): each check kind's verdicts on values built to
hold, to fail and to be inconclusive; claims files read and refused with the key named; the
scorecard over cells tables, one folder and several."""

from __future__ import annotations

import json
import math
import subprocess

import pandas as pd
import pytest
import yaml

from mmspec.claims import checks
from mmspec.claims.checks import FAILS, HOLDS, INCONCLUSIVE, NOT_APPLICABLE, Value
from mmspec.claims.claim import CLAIMS_DIR, STATS, ClaimError, load, parse_file
from mmspec.claims.scorecard import counts, evaluate, read_runs, summary
from mmspec.methods import registry


def v(point, low=math.nan, high=math.nan):
    return Value(point, low, high)


def exact(point):
    """A value whose point decides without an interval (a count of decoded tokens)."""
    return Value(point, exact=True)


# ---------------------------------------------------------------------------------------------
# the check kinds


@pytest.mark.parametrize(
    ("a", "b", "higher", "verdict"),
    [
        (v(5, 4.5, 5.5), v(3, 2.5, 3.5), True, HOLDS),
        (v(3, 2.5, 3.5), v(5, 4.5, 5.5), True, FAILS),
        (v(5, 4.0, 6.0), v(4.5, 3.8, 5.2), True, INCONCLUSIVE),  # intervals overlap
        (v(3, 2.5, 3.5), v(5, 4.5, 5.5), False, HOLDS),  # lower is better (FID)
        (v(5.0), v(4.0), True, INCONCLUSIVE),  # no interval: noise decides nothing
        (v(5.0, 4.9, 5.1), v(4.0), True, INCONCLUSIVE),  # one without an interval is enough
        (exact(5.0), exact(4.0), True, HOLDS),  # exact counts: any difference decides
        (exact(4.0), exact(4.0), True, INCONCLUSIVE),
        (v(math.nan), v(4.0), True, NOT_APPLICABLE),
    ],
)
def test_compare(a, b, higher, verdict):
    assert checks.compare(a, b, higher).verdict == verdict


def test_a_compare_with_a_tolerance_states_its_margin():
    assert checks.compare(v(3.2, 3.1, 3.3), v(2.0, 1.9, 2.1), tolerance=0.5).measured.endswith(
        "2 [1.9, 2.1] by 50%"
    )


def test_a_tolerance_widens_the_band_a_difference_must_leave():
    assert checks.compare(exact(4.2), exact(4.0), tolerance=0.1).verdict == INCONCLUSIVE
    assert checks.compare(exact(4.5), exact(4.0), tolerance=0.1).verdict == HOLDS
    assert checks.compare(exact(3.5), exact(4.0), tolerance=0.1).verdict == FAILS


@pytest.mark.parametrize(
    ("a", "verdict"),
    [
        (v(0.99, 0.98, 1.0), HOLDS),
        (v(0.62, 0.40, 0.83), FAILS),
        (v(0.95, 0.90, 1.01), INCONCLUSIVE),  # the floor lies inside the interval
        (v(0.98, 0.95, 1.0), INCONCLUSIVE),  # the point is above, the interval is not
        (v(0.97, 0.97, 0.99), HOLDS),  # at the floor counts
        (v(0.99), INCONCLUSIVE),  # no interval
        (exact(0.97), HOLDS),
    ],
)
def test_threshold(a, verdict):
    assert checks.threshold(a, 0.97).verdict == verdict
    assert checks.threshold(exact(12.0), 10.0, higher=False).verdict == FAILS


def test_order():
    separated = [v(6, 5.8, 6.2), v(5, 4.8, 5.2), v(4, 3.8, 4.2)]
    assert checks.order(separated).verdict == HOLDS
    swapped = [separated[1], separated[0], separated[2]]
    assert checks.order(swapped).verdict == FAILS
    close = [v(6, 5, 7), v(5.5, 4.5, 6.5), v(4, 3.8, 4.2)]
    assert checks.order(close).verdict == INCONCLUSIVE
    assert checks.order([v(6)]).verdict == NOT_APPLICABLE


def test_trend():
    rising = [(0.0, v(3, 2.8, 3.2)), (0.5, v(5, 4.8, 5.2)), (0.9, v(8, 7.7, 8.3))]
    assert checks.trend(rising).verdict == HOLDS
    assert checks.trend(rising, rises=False).verdict == FAILS
    assert checks.trend(list(reversed(rising))).verdict == HOLDS  # sorted by setting
    dip = [(0.0, v(3, 2.5, 3.5)), (0.5, v(2.9, 2.4, 3.4)), (0.9, v(8, 7.7, 8.3))]
    assert checks.trend(dip).verdict == INCONCLUSIVE  # not monotone, within the intervals
    falls = [(0.0, v(3, 2.8, 3.2)), (0.5, v(6, 5.8, 6.2)), (0.9, v(4, 3.8, 4.2))]
    assert checks.trend(falls).verdict == FAILS  # a step falls beyond its intervals
    assert checks.trend([(0.7, v(3))]).verdict == NOT_APPLICABLE


def x(point):
    """A speed (x) with an interval."""
    return v(point, point - 0.1, point + 0.1)


def test_dominates():
    claimed = [(x(4), v(0.99, 0.97, 1.0)), (x(7), v(0.95, 0.94, 0.96))]
    beaten = [(x(3.5), v(0.90, 0.85, 0.95)), (x(6.5), v(0.90, 0.87, 0.93))]
    assert checks.dominates(claimed, beaten).verdict == HOLDS
    above = [(x(6.5), v(0.995, 0.99, 1.0))]  # as fast as the 7.0 point, above its interval
    assert checks.dominates(claimed, above).verdict == FAILS
    faster = [(x(9), v(0.5, 0.4, 0.6))]  # no claimed point is as fast
    assert checks.dominates(claimed, faster).verdict == FAILS
    assert checks.dominates([], beaten).verdict == NOT_APPLICABLE
    # a speed without an interval decides nothing
    assert checks.dominates([(v(4), v(0.99, 0.97, 1.0))], beaten[:1]).verdict == INCONCLUSIVE


@pytest.mark.parametrize(
    ("baseline", "why"),
    [
        ((x(6.5), v(0.93, 0.9, 0.955)), "y: the claimed point is above, its interval overlaps"),
        ((x(6.95), v(0.90, 0.87, 0.93)), "x: as fast by points, the intervals overlap"),
        ((x(7.1), v(0.90, 0.87, 0.93)), "x: slower by points, the intervals overlap"),
    ],
)
def test_dominates_ahead_by_points_inside_the_intervals_is_inconclusive(baseline, why):
    claimed = [(x(4), v(0.99, 0.97, 1.0)), (x(7), v(0.95, 0.94, 0.96))]
    assert checks.dominates(claimed, [baseline]).verdict == INCONCLUSIVE, why


def test_dominates_equal_points_without_width_reach_each_other():
    assert checks.dominates([(exact(7), exact(0.95))], [(exact(7), exact(0.95))]).verdict == HOLDS
    # the same retention, summed in another order, differs by rounding only: reached
    tie = [(exact(7), exact(0.95 + 1e-12))]
    assert checks.dominates([(exact(7), exact(0.95))], tie).verdict == HOLDS
    assert (
        checks.dominates([(exact(7), exact(0.95))], [(exact(7), exact(0.95 + 1e-6))]).verdict
        == FAILS
    )


def test_near():
    assert checks.near(v(52.0, 51, 53), v(55.0, 54, 56), 0.1).verdict == HOLDS
    assert checks.near(v(70.0, 68, 72), v(55.0, 54, 56), 0.1).verdict == FAILS
    # the points are 5% apart, the intervals' far ends 16%: undecided
    assert checks.near(v(52.5, 49, 56), v(50.0, 49, 51), 0.1).verdict == INCONCLUSIVE
    # two FIDs without intervals: 4% apart decides nothing
    unsure = checks.near(v(29.77), v(28.63), 0.1)
    assert unsure.verdict == INCONCLUSIVE and unsure.measured.endswith(
        "(no interval: a value, a value)"
    )
    # a tight tolerance is printed as given, not rounded to 0%
    same = checks.near(exact(2.87), exact(2.87), 0.000001)
    assert same.verdict == HOLDS and same.measured.endswith("0% apart (<= 0.0001%?)")


def test_overall_verdict_of_several_sets():
    assert checks.overall([HOLDS, HOLDS, NOT_APPLICABLE]) == HOLDS
    assert checks.overall([FAILS, FAILS]) == FAILS
    assert checks.overall([HOLDS, FAILS]) == INCONCLUSIVE
    assert checks.overall([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert checks.overall([NOT_APPLICABLE]) == NOT_APPLICABLE


# ---------------------------------------------------------------------------------------------
# claims over cells tables


def cell(dataset, method, tau, low=None, high=None, seed=0, temperature=0.0, **hp) -> dict:
    registry_method = hp.pop("registry_method", method)
    row = {
        "dataset": dataset,
        "pair": "toy",
        "method": method,
        "hp": "_".join(f"{k}-{x}" for k, x in sorted(hp.items())) or "default",
        "hparams": json.dumps({"method": registry_method, **hp}),
        "seed": seed,
        "registry_method": registry_method,
        "temperature": temperature,
        "tau": tau,
        "tau_low": tau - 0.2 if low is None else low,
        "tau_high": tau + 0.2 if high is None else high,
    }
    for column in {c for s in STATS.values() for c in [s[0], *(s[1] or ())]} - set(row):
        row[column] = math.nan
    for column in ("label", "views", "weights", "tree", "acceptance", "gamma"):
        row[column] = None
    return row


def write_claims(folder, claims: list[dict], paper="P") -> None:
    folder.mkdir(exist_ok=True)
    (folder / "p.yaml").write_text(yaml.safe_dump({"paper": paper, "claims": claims}))


def claim(cid, check, **extra) -> dict:
    return {"id": cid, "claim": "c", "where": "Table 1", "paper": "1 vs 2", "check": check, **extra}


COMPARE_SELECTORS = {"a": {"method": "m"}, "b": {"method": "t"}}
COMPARE = {"kind": "compare", "stat": "tau", **COMPARE_SELECTORS}


def test_a_claim_is_checked_on_each_set_and_its_verdict_pools_them(tmp_path):
    write_claims(tmp_path / "claims", [claim("m-above-t", COMPARE, datasets=["cap", "story"])])
    cells = pd.DataFrame(
        [
            cell("cap", "m", 5.2),
            cell("cap", "t", 2.7),
            cell("story", "m", 2.4),
            cell("story", "t", 3.8),
            cell("video", "m", 1.0),  # a dataset the claim does not speak of
            cell("video", "t", 9.0),
        ]
    )
    table = evaluate(load(tmp_path / "claims"), {"run": cells})
    assert table["set"].tolist() == ["cap · toy · T=0 · seed 0", "story · toy · T=0 · seed 0"]
    assert table["verdict"].tolist() == [HOLDS, FAILS]
    row = summary(table).iloc[0]
    assert (row["verdict"], row["sets"], row["n_holds"], row["n_fails"]) == (INCONCLUSIVE, 2, 1, 1)
    assert "m tau 5.2 [5, 5.4] >? t tau 2.7 [2.5, 2.9]" in table["measured"].iloc[0]


def test_several_folders_pool_and_absent_cells_are_not_applicable(tmp_path):
    write_claims(
        tmp_path / "claims",
        [
            claim("m-above-t", COMPARE),
            claim("absent", {**COMPARE, "a": {"method": "nothing"}}),
            claim("half", {**COMPARE, "b": {"method": "missing"}}),
        ],
    )
    first = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 2.7)])
    second = pd.DataFrame([cell("cap", "m", 5.0), cell("cap", "t", 2.9)])
    table = evaluate(load(tmp_path / "claims"), {"one": first, "two": second})
    verdicts = dict(zip(summary(table)["claim_id"], summary(table)["verdict"], strict=True))
    assert verdicts == {"m-above-t": HOLDS, "absent": NOT_APPLICABLE, "half": NOT_APPLICABLE}
    assert sorted(table[table["claim_id"] == "m-above-t"]["run"]) == ["one", "two"]
    assert "no cell of method=missing" in table[table["claim_id"] == "half"]["measured"].iloc[0]
    assert counts(table) == {HOLDS: 1, FAILS: 0, INCONCLUSIVE: 0, NOT_APPLICABLE: 2}


def test_pairs_and_temperatures_scope_a_claim_to_the_sets_the_paper_reports(tmp_path):
    """Sets of another pair or temperature, where the sweep lacks b's cell, are not applicable
    (the applicability test flags the claim); scoped to the paper's pair and temperature, the
    claim has its one set, which holds."""
    other = {**cell("cap", "m", 5.0), "pair": "big"}  # b (method t) not run on pair big
    cells = pd.DataFrame(
        [
            cell("cap", "m", 5.2),
            cell("cap", "t", 2.7),
            other,
            cell("cap", "m", 4.0, temperature=1.0),
        ]
    )
    write_claims(tmp_path / "open", [claim("c", COMPARE)])
    write_claims(tmp_path / "scoped", [claim("c", COMPARE, pairs=["toy"], temperatures=[0])])
    loose = evaluate(load(tmp_path / "open"), {"run": cells})
    assert sorted(loose["verdict"]) == [HOLDS, NOT_APPLICABLE, NOT_APPLICABLE]
    scoped = evaluate(load(tmp_path / "scoped"), {"run": cells})
    assert scoped["verdict"].tolist() == [HOLDS]
    write_claims(tmp_path / "far", [claim("c", COMPARE, pairs=["nowhere"])])
    far = evaluate(load(tmp_path / "far"), {"run": cells})
    assert far["verdict"].tolist() == [NOT_APPLICABLE] and "on pair nowhere" in far["measured"][0]
    write_claims(tmp_path / "bad", [claim("c", COMPARE, temperatures=["greedy"])])
    with pytest.raises(ClaimError, match="temperatures: a list of numbers"):
        load(tmp_path / "bad")


def test_devices_scope_a_claim_to_the_papers_class_of_device(tmp_path):
    """An absolute speedup is judged only on the paper's class of device, named as a whole
    word (H20 is not H200); on any other device the claim is not applicable and says so."""
    speedup = {"kind": "threshold", "stat": "speedup", "value": 2.0, "a": {"method": "m"}}

    def on(device: str, point: float) -> pd.DataFrame:
        row = {**cell("cap", "m", 3.0), "device": device}
        row.update(speedup=point, speedup_low=point - 0.1, speedup_high=point + 0.1)
        return pd.DataFrame([row])

    write_claims(tmp_path / "claims", [claim("fast", speedup, devices=["H20"])])
    claims = load(tmp_path / "claims")
    assert claims[0].devices == ("H20",)
    judged = evaluate(claims, {"run": on("cuda:NVIDIA H20", 2.5)})
    assert judged["verdict"].tolist() == [HOLDS]
    assert evaluate(claims, {"run": on("cuda:nvidia h20", 1.5)})["verdict"].tolist() == [FAILS]
    for device in ("cuda:NVIDIA H200", "cpu"):
        elsewhere = evaluate(claims, {"run": on(device, 2.5)})
        assert elsewhere["verdict"].tolist() == [NOT_APPLICABLE]
        assert "on device H20" in elsewhere["measured"][0]
    write_claims(tmp_path / "bad", [claim("fast", speedup, devices="A100")])
    with pytest.raises(ClaimError, match="devices: a list of names"):
        load(tmp_path / "bad")


def test_a_threshold_over_the_mean_of_datasets_reads_every_dataset(tmp_path):
    """The paper's average (TABED's 1.74x): one dataset above the floor and one below hold or
    fail by their mean, not each apart."""
    check = {"kind": "threshold", "stat": "tau", "value": 3.0, "mean_over": "dataset",
             "a": {"method": "m"}}  # fmt: skip
    write_claims(tmp_path / "claims", [claim("avg", check, per=["pair", "temperature", "seed"])])
    claims = load(tmp_path / "claims")

    def verdict(second: float) -> str:
        cells = pd.DataFrame([cell("cap", "m", 3.6, 3.5, 3.7), cell("vqa", "m", second)])
        return evaluate(claims, {"run": cells})["verdict"].tolist()

    assert verdict(2.8) == [HOLDS]  # mean 3.2, half-width about 0.11
    assert verdict(1.8) == [FAILS]  # mean 2.7


def test_a_compare_against_the_mean_of_its_b_cells(tmp_path):
    """TABED's +5% over the single views' mean: above the mean of M and T holds though T is
    higher still; below the mean fails; the mean's interval is the mean of the ends."""
    check = {**COMPARE, "b": [{"method": "t"}, {"method": "c"}], "against": "mean"}
    write_claims(tmp_path / "claims", [claim("avg", check)])
    claims = load(tmp_path / "claims")

    def judged(m: float) -> tuple[str, str]:
        cells = pd.DataFrame([cell("d", "m", m), cell("d", "t", 3.2), cell("d", "c", 2.0)])
        table = evaluate(claims, {"run": cells})
        return table["verdict"].iloc[0], table["measured"].iloc[0]

    assert judged(3.1)[0] == HOLDS  # [2.9, 3.3] against the mean 2.6 [2.4, 2.8]
    assert "mean of t tau and c tau 2.6 [2.4, 2.8]" in judged(3.1)[1]
    assert judged(2.6)[0] == INCONCLUSIVE
    assert judged(2.0)[0] == FAILS
    write_claims(tmp_path / "bad", [claim("avg", {**check, "against": "median"})])
    with pytest.raises(ClaimError, match="against: 'each' or 'mean'"):
        load(tmp_path / "bad")


def test_a_rank_needs_a_whole_number_of_places_among_its_cells(tmp_path):
    for within in (0, 4, 1.5, True):
        write_claims(tmp_path / "claims", [claim("r", {**RANK, "within": within})])
        with pytest.raises(ClaimError, match="within: a whole number from 1 to 3"):
            load(tmp_path / "claims")


def test_a_key_repeated_in_a_claim_is_refused(tmp_path):
    folder = tmp_path / "claims"
    folder.mkdir()
    (folder / "p.yaml").write_text(
        "paper: P\nclaims:\n  - id: c\n    claim: c\n    where: Table 1\n    paper: x\n"
        "    pairs: [a]\n    pairs: [b]\n"
        "    check: {kind: compare, stat: tau, a: {method: m}, b: {method: t}}\n"
    )
    repeated = r"(?s)p.yaml: not valid YAML.*'pairs' is repeated.*line 8"
    with pytest.raises(ClaimError, match=repeated):
        load(folder)


def test_a_selector_that_picks_several_cells_says_so(tmp_path):
    write_claims(tmp_path / "claims", [claim("c", COMPARE)])
    cells = pd.DataFrame(
        [cell("cap", "m", 5.2, gamma=3), cell("cap", "m", 5.9, gamma=7), cell("cap", "t", 2.7)]
    )
    table = evaluate(load(tmp_path / "claims"), {"run": cells})
    assert table["verdict"].tolist() == [NOT_APPLICABLE]
    assert "2 cells of method=m" in table["measured"].iloc[0]
    assert "add keys that pick one" in table["measured"].iloc[0]
    write_claims(
        tmp_path / "pinned", [claim("c", {**COMPARE, "a": {"method": "m", "hp": {"gamma": 7}}})]
    )
    pinned = evaluate(load(tmp_path / "pinned"), {"run": cells})
    assert pinned["verdict"].tolist() == [HOLDS] and "5.9" in pinned["measured"].iloc[0]


LAMBDAS = [(0.0, 3), (0.5, 5), (0.9, 8)]


def test_trend_order_dominates_and_means_over_datasets_read_their_cells(tmp_path):
    cells = pd.DataFrame(
        [
            *(
                cell("v", f"lv{x}", t, lam=x, registry_method="lv")
                for x, t in [(0.0, 3), (0.5, 5), (0.9, 8)]
            ),
            cell("v", "e", 4.0),
            cell("v", "d", 6.0),
            cell("v", "k", 2.0),
            cell("a", "ens", 5.0),
            cell("a", "m", 4.8),
            cell("b", "ens", 4.0),
            cell("b", "m", 3.0),
        ]
    )
    # retention for the frontier: lambda costs quality
    cells["retention"] = [1.0, 0.98, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    cells["retention_low"] = cells["retention"] - 0.01
    cells["retention_high"] = cells["retention"] + 0.01
    k = cells["method"] == "k"  # a blind baseline
    cells.loc[k, ["tau", "tau_low", "tau_high"]] = [4.5, 4.3, 4.7]
    cells.loc[k, ["retention", "retention_low", "retention_high"]] = [0.95, 0.94, 0.96]
    trend = {"kind": "trend", "stat": "tau", "along": "lam", "a": {"registry_method": "lv"}}
    ordered = [{"method": "d"}, {"method": "e"}, {"method": "absent"}]
    frontier = {"kind": "dominates", "a": {"registry_method": "lv"}, "b": {"method": "k"}}
    mean = {**COMPARE, "mean_over": "dataset", "a": {"method": "ens"}, "b": [{"method": "m"}]}
    write_claims(
        tmp_path / "claims",
        [
            claim("trend", trend),
            claim("order", {"kind": "order", "stat": "tau", "cells": ordered}),
            claim("frontier", frontier),
            claim("mean", mean, per=["pair", "temperature", "seed"]),
        ],
    )
    table = evaluate(load(tmp_path / "claims"), {"run": cells}).set_index("claim_id")
    assert table.loc["trend", "verdict"] == HOLDS
    assert table.loc["trend", "measured"].startswith("0: tau 3 [2.8, 3.2], 0.5: tau 5")
    assert table.loc["order", "verdict"] == HOLDS  # over the cells the set has
    assert " >? " in table.loc["order", "measured"]  # a question, as compare's
    # lambda 0.5: tau [4.8, 5.2] above [4.3, 4.7], retention [0.97, 0.99] above [0.94, 0.96]
    assert table.loc["frontier", "verdict"] == HOLDS
    # means 4.5 [4.36, 4.64] vs 3.9 [3.76, 4.04]: each dataset's +-0.2 over two datasets
    assert table.loc["mean", "verdict"] == HOLDS
    assert "mean over 2 datasets" in table.loc["mean", "measured"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"id": "x", "claim": "c", "where": "w", "paper": "p"}, r"claim 'x': needs \['check'\]"),
        (
            claim("x", COMPARE, typo=1),
            r"claim 'x': unknown key\(s\) \['typo'\]; a claim's keys: \['check', 'claim',",
        ),
        (claim("x", {**COMPARE, "kind": "beats"}), r"claim 'x'.check.kind: one of"),
        (claim("x", {**COMPARE, "stat": "taus"}), r"claim 'x'.check.stat: one of"),
        (claim("x", {**COMPARE, "value": 1}), r"check compare takes no \['value'\]"),
        (claim("x", {**COMPARE, "a": {"methods": "m"}}), r"claim 'x'.check.a: unknown selector"),
        (
            claim("x", {"kind": "threshold", "stat": "tau", "a": {"method": "m"}}),
            r"needs \['value'\]",
        ),
        (claim("x", COMPARE, per=["dataset", "gpu"]), r"claim 'x'.per: a list of keys of"),
        (claim("x", COMPARE, per="pair"), r"claim 'x'.per: a list of keys of .*got 'pair'"),
        # a wrong type is named, never read as something else ("false" is a true string)
        (claim("x", {**COMPARE, "higher": "false"}), r"claim 'x'.check.higher: true or false"),
        (
            claim(
                "x",
                {"kind": "trend", "stat": "tau", "a": {"method": "m"}, "along": "g", "rises": "no"},
            ),
            r"claim 'x'.check.rises: true or false",
        ),
        (
            claim("x", {"kind": "threshold", "stat": "tau", "a": {"method": "m"}, "value": "4"}),
            r"claim 'x'.check.value: a number, got '4'",
        ),
        (claim("x", {**COMPARE, "tolerance": "5%"}), r"claim 'x'.check.tolerance: a number"),
        (claim("x", {**COMPARE, "tolerance": -0.1}), r"claim 'x'.check.tolerance: at least 0"),
        (claim("x", "compare"), r"claim 'x'.check: a mapping of `kind` and its keys"),
        (  # a mean over datasets needs sets of several datasets
            claim("x", {**COMPARE, "mean_over": "dataset"}),
            r"claim 'x'.per: the check's `mean_over: dataset` averages",
        ),
        (  # a misspelled key is named beside the one it misses
            claim("x", {"kind": "compare", "stats": "tau", **COMPARE_SELECTORS}),
            r"check compare needs \['stat'\] \(and takes no \['stats'\]\)",
        ),
    ],
)
def test_a_bad_claim_is_refused_naming_its_file_claim_and_key(tmp_path, entry, message):
    write_claims(tmp_path, [entry])
    with pytest.raises(ClaimError, match=message) as info:
        parse_file(tmp_path / "p.yaml")
    assert str(tmp_path / "p.yaml") in str(info.value)


def test_a_claims_folder_that_is_not_one_or_not_yaml_is_named(tmp_path):
    with pytest.raises(ClaimError, match="not a folder"):
        load(tmp_path / "missing")
    (tmp_path / "p.yaml").write_text("paper: P\nclaims: [\n")
    with pytest.raises(ClaimError, match=r"p.yaml: not valid YAML"):
        load(tmp_path)


def test_a_claim_naming_a_method_or_hyperparameter_that_does_not_exist_says_so(tmp_path):
    """A typo in a value reads "not applicable" on every sweep: the line says what is unknown,
    with the names it is close to."""
    typo = {**COMPARE, "a": {"registry_method": "sage_tre", "hp": {"sage_n_mx": 16}}}
    write_claims(tmp_path / "claims", [claim("typo", typo), claim("real", COMPARE)])
    cells = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 2.7)])
    table = evaluate(load(tmp_path / "claims"), {"run": cells}).set_index("claim_id")
    measured = table.loc["typo", "measured"]
    assert table.loc["typo", "verdict"] == NOT_APPLICABLE
    assert "no registry method is named 'sage_tre' (did you mean 'sage_tree'" in measured
    assert "no component reads a hyperparameter 'sage_n_mx' (did you mean 'sage_n_max'" in measured
    assert table.loc["real", "verdict"] == HOLDS
    # a typo in a later selector, where the first finds its cells, says so as well
    later = {**COMPARE, "b": [{"method": "t"}, {"registry_method": "sd_tre"}]}
    write_claims(tmp_path / "later", [claim("later", later)])
    row = evaluate(load(tmp_path / "later"), {"run": cells}).iloc[0]
    assert row["verdict"] == NOT_APPLICABLE
    assert "no registry method is named 'sd_tre' (did you mean 'sd_tree'" in row["measured"]
    # a value of another type than the hyperparameter's ("5" for gamma 5) matches no cell
    typed = {**COMPARE, "a": {"method": "m", "hp": {"gamma": "5"}}}
    write_claims(tmp_path / "typed", [claim("typed", typed)])
    row = evaluate(load(tmp_path / "typed"), {"run": cells}).iloc[0]
    assert row["verdict"] == NOT_APPLICABLE
    assert "no cell can hold it: gamma='5' should be an integer" in row["measured"]


def test_a_claim_naming_a_dataset_pair_or_value_no_cell_has_says_so(tmp_path):
    """A misspelt dataset, pair or column value reads "not applicable" naming it and the names
    the cells have that are close to it, not as a sweep that lacks the cells."""
    typo = {**COMPARE, "a": {"method": "m", "views": "MTT"}}
    write_claims(
        tmp_path / "claims",
        [claim("dataset", COMPARE, datasets=["cpa"]), claim("views", typo, pairs=["tyo"])],
    )
    cells = pd.DataFrame([{**cell("cap", "m", 5.2), "views": "MT"}, cell("cap", "t", 2.7)])
    table = evaluate(load(tmp_path / "claims"), {"run": cells}).set_index("claim_id")
    assert (table["verdict"] == NOT_APPLICABLE).all()
    assert "no cell has dataset 'cpa' (did you mean 'cap'?)" in table.loc["dataset", "measured"]
    views = table.loc["views", "measured"]
    assert "no cell has pair 'tyo' (did you mean 'toy'?)" in views
    assert "no cell has views 'MTT' (did you mean 'MT'?)" in views
    assert "method" not in views.split(":", 1)[1]  # a value the cells have is not named


def test_one_cells_table_given_twice_is_refused(tmp_path):
    results = tmp_path / "results"
    (results / "summary").mkdir(parents=True)
    (results / "summary" / "cells.parquet").write_text("read only when each table is once")
    with pytest.raises(ValueError, match=r"cells.parquet: given twice \(as .*results\)"):
        read_runs([results, results / "summary" / "cells.parquet"])


def test_the_projects_claims_name_methods_stats_and_sections_that_exist():
    from mmspec.report import heads, image_generation, loose, pareto, summary, trees, weights

    claims = load(CLAIMS_DIR)
    papers = {c.paper for c in claims}
    assert papers == {"TABED", "SAGE", "SpecVLM", "DREAM", "LVSpec", "LANTERN"}
    sections = (heads, image_generation, loose, pareto, summary, trees, weights)
    anchors = {section.ANCHOR for section in sections}
    for c in claims:
        assert c.section in anchors, c.key
        selectors = [
            s for v in c.check.selectors.values() for s in (v if isinstance(v, list) else [v])
        ]
        for s in selectors:
            names = s.columns.get("registry_method", [])
            for name in names if isinstance(names, list) else [names]:
                assert name in registry.METHODS, (c.key, name)
            assert s.unknown_names() == [], c.key  # and every hp key is some component's


def test_mmspec_claims_prints_the_scorecard_of_a_results_folder(tmp_path):
    import pyarrow as pa

    from mmspec.storage.tables import write_table
    from mmspec.sweep.cell_metrics import CELLS

    frame = pd.DataFrame([cell("toy_caption", "m", 5.2), cell("toy_caption", "t", 2.7)])
    frame["gamma"] = 5  # TABED's gamma, which its claims pin
    for name in set(CELLS.names) - set(frame):
        frame[name] = None  # the contract's other columns, empty
    table = pa.Table.from_pandas(frame[CELLS.names], schema=CELLS, preserve_index=False)
    write_table(table, tmp_path / "results" / "summary" / "cells.parquet", CELLS)
    done = subprocess.run(
        ["mmspec", "claims", str(tmp_path / "results"), "--out", str(tmp_path / "claims.parquet")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "HOLDS  TABED/m-above-t-single-image: Drafting from the whole multimodal" in done.stdout
    assert "toy_caption · toy · T=0 · seed 0: holds: m tau 5.2" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("claims: 1 holds, 0 fails")
    assert pd.read_parquet(tmp_path / "claims.parquet")["verdict"].tolist().count(HOLDS) == 1
    assert f"rows written to {tmp_path / 'claims.parquet'}" in done.stderr


def test_verdicts_in_markdown_pool_each_scorecards_sets_and_mark_harness_checks(tmp_path):
    """`mmspec claims --markdown` and the paper pages' verdict tables: one row per claim, one
    column per scorecard, each with its sets' tally and the points' reading where it differs."""
    from mmspec.claims import pages

    write_claims(
        tmp_path / "claims",
        [
            claim("m-above-t", COMPARE),
            claim(
                "identity", {**COMPARE, "a": {"method": "t"}, "b": {"method": "m"}}, harness=True
            ),
            claim("absent", {**COMPARE, "a": {"method": "nothing"}}),
        ],
    )
    claims = load(tmp_path / "claims")
    one = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 2.7)])
    # a second set where m is ahead by its point only (inside t's interval)
    two = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 5.1, low=4.0, high=5.5)])
    table = pages.verdicts(
        {
            "seed 0": evaluate(claims, {"a": one}),
            "seeds 0+1": evaluate(claims, {"a": one, "b": two}),
        }
    )
    assert table.splitlines() == [
        "| claim | seed 0 | seeds 0+1 |",
        "|---|---|---|",
        "| `m-above-t` | holds | inconclusive (1 holds, 1 inconclusive of 2; points: 2 hold) |",
        "| `absent` | n/a | n/a |",
        "| `identity` (harness check) | fails | inconclusive (1 fails, 1 inconclusive of 2) |",
    ]
    # the command line prints the same table for the folders it is given
    import pyarrow as pa

    from mmspec.storage.tables import write_table
    from mmspec.sweep.cell_metrics import CELLS

    for name, frame in (("a", one), ("b", two)):
        frame = frame.assign(gamma=5, dataset="toy_caption")
        for column in set(CELLS.names) - set(frame):
            frame[column] = None
        table = pa.Table.from_pandas(frame[CELLS.names], schema=CELLS, preserve_index=False)
        write_table(table, tmp_path / name / "summary" / "cells.parquet", CELLS)
    done = subprocess.run(
        ["mmspec", "claims", str(tmp_path / "a"), str(tmp_path / "b"), "--markdown"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "`m-above-t-single-image`" in line)
    assert row == (
        "| TABED | `m-above-t-single-image` | inconclusive (1 holds, 1 inconclusive of 2; "
        "points: 2 hold) |"
    )


def test_the_report_shows_the_scorecard_first_and_escapes_it(tmp_path):
    import pyarrow as pa
    from report_pages import CELL_ROWS, sections

    from mmspec.report.page import write_report
    from mmspec.storage.tables import CLAIMS, write_table
    from mmspec.sweep.cell_metrics import CELLS

    write_table(pa.Table.from_pylist(CELL_ROWS, schema=CELLS), tmp_path / "cells.parquet", CELLS)
    hostile = "<script>alert(1)</script>"
    write_claims(tmp_path / "claims", [claim("c", COMPARE, note=hostile, section="summary")])
    cells = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 2.7)])
    table = evaluate(load(tmp_path / "claims"), {"run": cells})
    write_table(pa.Table.from_pandas(table, schema=CLAIMS), tmp_path / "claims.parquet", CLAIMS)
    out = tmp_path / "report.html"
    write_report(tmp_path / "cells.parquet", out, claims_path=tmp_path / "claims.parquet")
    page = out.read_text()
    found = sections(page)
    assert next(iter(found)) == "Reproduction: the papers' claims"
    scorecard = found["Reproduction: the papers' claims"]
    assert "class='verdict v-holds'" in scorecard and "href='#summary'" in scorecard
    assert hostile not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in scorecard
    assert "1 holds, 0 fails, 0 inconclusive, 0 not applicable" in scorecard


def rows(*specs) -> pd.DataFrame:
    """Cells from (method, column values) pairs on one dataset, with an hp where given."""
    found = []
    for method, values in specs:
        values = dict(values)
        hp = values.pop("hp", {})
        row = cell("d", method, values.pop("tau", 1.0), **hp)
        row.update(values)
        found.append(row)
    return pd.DataFrame(found)


def tau(point, low, high) -> dict:
    return {"tau": point, "tau_low": low, "tau_high": high}


def retention(point, low, high, **more) -> dict:
    return {"retention": point, "retention_low": low, "retention_high": high, **more}


COMPARE_TAU = COMPARE
THRESHOLD = {"kind": "threshold", "stat": "retention", "value": 0.97, "a": {"method": "m"}}
ORDER = {"kind": "order", "stat": "tau", "cells": [{"method": x} for x in ("a", "b", "c")]}
TREND = {"kind": "trend", "stat": "tau", "along": "lam", "a": {"registry_method": "lv"}}
FRONTIER = {"kind": "dominates", "a": {"registry_method": "lv"}, "b": {"method": "k"}}
NEAR = {"kind": "near", "stat": "fid", "tolerance": 0.1, "a": {"method": "m"}, "b": {"method": "t"}}
NEAR_TAU = {**NEAR, "stat": "tau"}
RANK = {
    "kind": "rank",
    "stat": "tau",
    "within": 2,
    "a": {"method": "a"},
    "b": [{"method": x} for x in ("b", "c", "d")],
}


def lv(*points) -> list:
    """LVSpec-like cells along lambda: (lambda, tau triple, retention triple)."""
    return [(f"lv{x}", {"hp": {"lam": x, "registry_method": "lv"}, **t, **r}) for x, t, r in points]


def T(point: float, half: float = 0.2) -> dict:
    return tau(point, point - half, point + half)


def R(point: float, half: float = 0.02) -> dict:
    return retention(point, point - half, point + half)


@pytest.mark.parametrize(
    ("check", "cells", "verdict"),
    [
        (COMPARE_TAU, [("m", T(5)), ("t", T(3))], HOLDS),
        (COMPARE_TAU, [("m", T(3)), ("t", T(5))], FAILS),
        (COMPARE_TAU, [("m", T(5, 1)), ("t", T(4.8, 0.8))], INCONCLUSIVE),
        (THRESHOLD, [("m", R(0.99, 0.01))], HOLDS),
        (THRESHOLD, [("m", R(0.62, 0.2))], FAILS),
        (THRESHOLD, [("m", R(0.98, 0.03))], INCONCLUSIVE),
        (ORDER, [("a", T(6)), ("b", T(5)), ("c", T(4))], HOLDS),
        (ORDER, [("a", T(5)), ("b", T(6)), ("c", T(4))], FAILS),
        (ORDER, [("a", T(6, 1)), ("b", T(5.5, 1)), ("c", T(4))], INCONCLUSIVE),
        (TREND, lv((0.0, T(3), {}), (0.5, T(5), {}), (0.9, T(8), {})), HOLDS),
        (TREND, lv((0.0, T(3), {}), (0.5, T(8), {}), (0.9, T(5), {})), FAILS),
        (TREND, lv((0.0, T(3, 0.5), {}), (0.5, T(2.9, 0.5), {}), (0.9, T(8), {})), INCONCLUSIVE),
        (FRONTIER, [*lv((0.5, T(5), R(0.99, 0.01))), ("k", {**T(4.5), **R(0.95)})], HOLDS),
        # ahead by points on both axes, retention's intervals overlap
        (FRONTIER, [*lv((0.5, T(5), R(0.98))), ("k", {**T(4.5), **R(0.95)})], INCONCLUSIVE),
        (FRONTIER, [*lv((0.5, T(5), R(0.90))), ("k", {**T(4.5), **R(0.99, 0.01)})], FAILS),
        (
            FRONTIER,
            [*lv((0.5, T(5), R(0.95, 0.05))), ("k", {**T(4.5), **R(0.96, 0.03)})],
            INCONCLUSIVE,
        ),
        (NEAR, [("m", {"fid": 52.0}), ("t", {"fid": 55.0})], INCONCLUSIVE),  # no interval
        (NEAR_TAU, [("m", T(5.0, 0.1)), ("t", T(5.1, 0.1))], HOLDS),
        (NEAR_TAU, [("m", T(7.0, 0.1)), ("t", T(5.0, 0.1))], FAILS),
        (NEAR_TAU, [("m", T(5.4, 0.3)), ("t", T(5.0, 0.1))], INCONCLUSIVE),
        # best or second-best of four: second holds, third fails, a tie for second is open
        (RANK, [("a", T(5)), ("b", T(6)), ("c", T(4)), ("d", T(3))], HOLDS),
        (RANK, [("a", T(5)), ("b", T(6)), ("c", T(7)), ("d", T(3))], FAILS),
        (RANK, [("a", T(5)), ("b", T(6)), ("c", T(5.1)), ("d", T(3))], INCONCLUSIVE),
        ({**RANK, "within": 1}, [("a", T(5)), ("b", T(6)), ("c", T(4)), ("d", T(3))], FAILS),
    ],
)
def test_each_check_kind_over_cells_tables(tmp_path, check, cells, verdict):
    """Every kind fed a cells table built to hold, to fail and (where it can) to be
    inconclusive, through the claims file, the selectors and the scorecard."""
    write_claims(tmp_path / "claims", [claim("c", check)])
    table = evaluate(load(tmp_path / "claims"), {"run": rows(*cells)})
    assert table["verdict"].tolist() == [verdict], table["measured"].tolist()


def test_the_points_alone_are_given_where_the_intervals_leave_a_set_undecided(tmp_path):
    """A retention of 0.983 [0.968, 0.996] against a floor of 0.97 is inconclusive; its point
    alone holds, and the scorecard says so beside the verdict."""
    write_claims(tmp_path / "claims", [claim("c", THRESHOLD)])
    cells = pd.DataFrame([{**cell("d", "m", 5.0), **retention(0.983, 0.968, 0.996)}])
    table = evaluate(load(tmp_path / "claims"), {"run": cells})
    assert table[["verdict", "by_points"]].values.tolist() == [[INCONCLUSIVE, HOLDS]]
    row = summary(table).iloc[0]
    assert (row["n_holds"], row["n_holds_by_points"]) == (0, 1)
    from mmspec.stages.claims import text

    printed = text(table)
    assert "INCONCLUSIVE  P/c: c (by the points alone, 1 of 1 hold)" in printed
    assert "inconclusive (by the points alone: holds): m retention 0.983 [0.968, 0.996]" in printed


def test_harness_checks_are_listed_apart_and_counted_in_no_papers_tally(tmp_path):
    """A claim marked `harness` (an identity of mmspec itself) keeps its verdict but leaves the
    papers' count; the words and the report list it under harness checks."""
    import pyarrow as pa
    from report_pages import CELL_ROWS, sections

    from mmspec.report.page import write_report
    from mmspec.stages.claims import text
    from mmspec.storage.tables import CLAIMS, write_table
    from mmspec.sweep.cell_metrics import CELLS

    identity = {**COMPARE, "a": {"method": "t"}, "b": {"method": "m"}, "higher": False}
    write_claims(
        tmp_path / "claims",
        [claim("m-above-t", COMPARE), claim("identity", identity, harness=True)],
    )
    cells = pd.DataFrame([cell("cap", "m", 5.2), cell("cap", "t", 2.7)])
    table = evaluate(load(tmp_path / "claims"), {"run": cells})
    assert table.set_index("claim_id")["harness"].to_dict() == {
        "m-above-t": False,
        "identity": True,
    }
    assert counts(table) == {HOLDS: 1, FAILS: 0, INCONCLUSIVE: 0, NOT_APPLICABLE: 0}
    assert counts(table, harness=True) == {HOLDS: 1, FAILS: 0, INCONCLUSIVE: 0, NOT_APPLICABLE: 0}
    printed = text(table).splitlines()
    apart = printed.index(
        "harness checks (identities of mmspec itself, not counted among the papers' claims):"
    )
    assert any("P/identity: c" in line for line in printed[apart:]) and printed[-1].startswith(
        "claims: 1 holds, 0 fails"
    )
    assert "harness checks: 1 holds, 0 fails, 0 inconclusive, 0 not applicable" in printed
    write_table(pa.Table.from_pylist(CELL_ROWS, schema=CELLS), tmp_path / "cells.parquet", CELLS)
    write_table(pa.Table.from_pandas(table, schema=CLAIMS), tmp_path / "claims.parquet", CLAIMS)
    write_report(
        tmp_path / "cells.parquet", tmp_path / "r.html", claims_path=tmp_path / "claims.parquet"
    )
    scorecard = sections((tmp_path / "r.html").read_text())["Reproduction: the papers' claims"]
    assert "1 holds, 0 fails, 0 inconclusive, 0 not applicable. Each claim" in scorecard
    assert scorecard.count("<table class='claims'>") == 2 and "Harness checks" in scorecard
    with pytest.raises(ClaimError, match=r"claim 'x'.harness: true or false"):
        write_claims(tmp_path / "bad", [claim("x", COMPARE, harness="yes")])
        parse_file(tmp_path / "bad" / "p.yaml")


def test_the_projects_identities_are_harness_checks():
    harness = {c.key for c in load(CLAIMS_DIR) if c.harness}
    assert harness == {
        "LVSpec/lambda-0-is-exact-sd",
        "SpecVLM/pruned-view-drafts-fewer-visual-tokens",
        # a lossless rule's divergences from AR: 0 by construction unless mmspec errs
        "SAGE/no-loss-in-output-quality",
    }


def test_a_mean_over_datasets_carries_the_datasets_intervals(tmp_path):
    """TABED-like means: 4.5 vs 3.9 holds with each dataset's tau at +-0.2, is inconclusive
    when one dataset's interval is wide, and so is a mean with a dataset without interval."""
    mean = {**COMPARE, "mean_over": "dataset", "a": {"method": "ens"}, "b": [{"method": "m"}]}
    write_claims(tmp_path / "claims", [claim("mean", mean, per=["pair", "temperature", "seed"])])

    def verdict(m_on_a: dict) -> tuple[str, str]:
        cells = pd.DataFrame(
            [cell("a", "ens", 5.0), cell("b", "ens", 4.0), cell("b", "m", 3.0)]
            + [{**cell("a", "m", 4.8), **m_on_a}]
        )
        row = evaluate(load(tmp_path / "claims"), {"run": cells}).iloc[0]
        return row["verdict"], row["by_points"]

    assert verdict({}) == (HOLDS, HOLDS)
    assert verdict({"tau_low": 3.0, "tau_high": 6.6}) == (INCONCLUSIVE, HOLDS)
    assert verdict({"tau_low": math.nan, "tau_high": math.nan}) == (INCONCLUSIVE, HOLDS)


def test_the_report_says_a_sweep_lacks_a_claim_only_when_it_is_not_applicable():
    """A claim with a verdict was shown by the sweep: its row names the preset that studies it
    in full, without saying the sweep does not show it."""
    from mmspec.claims.scorecard import COLUMNS
    from mmspec.report import reproduction

    def row(claim_id, verdict):
        values = {c: "" for c in COLUMNS}
        values.update(paper="dream", claim_id=claim_id, claim=claim_id, shown_by="toy_dream")
        values.update(verdict=verdict, by_points=verdict, measured="m")
        return values

    table = pd.DataFrame([row("shown", "fails"), row("lacking", "not applicable")])
    html = reproduction.render(table, set())
    shown, lacking = html.split("<tr class=")[-2:]
    assert "toy_dream.yaml studies it in full" in shown
    assert "does not show it" not in shown
    assert "This sweep does not show it; config/presets/toy_dream.yaml" in lacking


def test_an_identity_of_two_decodings_is_decided_by_exact_step_counts(tmp_path):
    """LVSpec at lambda 0 is exact SD: the same steps over the same tokens. Equal tau with
    bootstrap intervals cannot decide that (each interval is its own cell's), the exact count
    of steps does: equal counts hold, one step more fails, and the count prints in full."""
    identity = {"kind": "near", "stat": "steps", "tolerance": 0, **COMPARE_SELECTORS}
    write_claims(tmp_path / "claims", [claim("same", identity, harness=True)])
    claims = load(tmp_path / "claims")

    def verdict(steps_b: int) -> pd.Series:
        cells = pd.DataFrame(
            [{**cell("d", "m", 2.87), "steps": 1521}, {**cell("d", "t", 2.87), "steps": steps_b}]
        )
        return evaluate(claims, {"run": cells}).iloc[0]

    assert verdict(1521)["verdict"] == HOLDS
    row = verdict(1522)
    assert row["verdict"] == FAILS and "m steps 1521 vs t steps 1522" in row["measured"]
    # the same two cells through tau's intervals: inconclusive, however equal the points
    near_tau = {**identity, "stat": "tau", "tolerance": 0.000001}
    write_claims(tmp_path / "claims", [claim("same", near_tau, harness=True)])
    cells = pd.DataFrame([cell("d", "m", 2.87), cell("d", "t", 2.87)])
    assert evaluate(load(tmp_path / "claims"), {"run": cells})["verdict"].tolist() == [INCONCLUSIVE]
