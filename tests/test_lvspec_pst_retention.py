"""analysis/lvspec/pst_retention.py on results folders written here: PST's change in tau and
its paired change in retention per sample-turn, per set and pooled over folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "analysis" / "lvspec" / "pst_retention.py"
SAMPLES = 8
PLAIN = [1.0] * SAMPLES


def _cell(method, hp, tau, acceptance="lvspec", **hparams):
    return {
        "dataset": "vd",
        "pair": "p",
        "method": method,
        "hp": hp,
        "hparams": json.dumps({"acceptance": acceptance, "gamma": 10, **hparams}),
        "seed": 0,
        "acceptance": acceptance,
        "temperature": 0.0,
        "tau": tau,
    }


def _write(results: Path, cells: list[dict], scores: dict[tuple[str, str], tuple[list, list]]):
    (results / "summary").mkdir(parents=True)
    pd.DataFrame(cells).to_parquet(results / "summary" / "cells.parquet")
    for (method, hp), (quality, judge) in scores.items():
        folder = results / "score" / "dataset=vd" / "pair=p" / f"method={method}" / f"hp={hp}"
        (folder / "seed=0").mkdir(parents=True)
        pd.DataFrame(
            {
                "sample_id": [f"s{i}" for i in range(SAMPLES)],
                "turn": 0,
                "quality": quality,
                "ar_quality": 1.0,
                "judge_score": judge,
                "ar_judge_score": 2.0,
            }
        ).to_parquet(folder / "seed=0" / "scores.parquet")


def _sweep() -> tuple[list[dict], dict]:
    lv = {"lvspec_n": 10, "views": "M"}
    cells = [
        _cell("sd10", "gamma-10", 2.9, acceptance="greedy"),
        _cell("nopst", "l7", 5.0, lvspec_lambda=0.7, pst=False, **lv),
        _cell("pst", "l7", 5.5, lvspec_lambda=0.7, pst=True, **lv),
        _cell("ahead", "l7", 5.2, lvspec_lambda=0.7, pst=True, pst_ahead=True, **lv),
        # no cell without PST at lambda 0.9: nothing to pair it with
        _cell("pst", "l9", 7.0, lvspec_lambda=0.9, pst=True, **lv),
        _cell("random", "r5", 4.5, acceptance="random_relax", relax_rho=0.5),
    ]
    scores = {
        ("nopst", "l7"): (PLAIN, [2.0] * SAMPLES),
        # Eq. 11's PST keeps one fact fewer in 3 of 8 descriptions; the judge takes 1 point
        # off 4 of them (of an AR mean of 2.0)
        ("pst", "l7"): ([0.9, 0.9, 0.9] + PLAIN[3:], [1.0] * 4 + [2.0] * 4),
        # looking ahead only, it keeps one more fact in 2 of them
        ("ahead", "l7"): ([1.1, 1.1] + PLAIN[2:], [2.0] * SAMPLES),
        ("pst", "l9"): (PLAIN, [2.0] * SAMPLES),
    }
    return cells, scores


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def _checked(tmp_path: Path, *options: str, sets: int = 1) -> str:
    """The script's output over `sets` results folders of the sweep above."""
    folders = [tmp_path / f"results{i}" for i in range(sets)]
    for folder in folders:
        _write(folder, *_sweep())
    out = _run(*map(str, folders), *options)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_each_pst_variant_is_paired_per_sample_turn_with_no_pst_at_its_lambda(tmp_path):
    out = _checked(tmp_path)
    per_set, pooled = out.split("pooled over every set")
    # 3 of 8 lose 0.1 of an AR mean of 1.0: -3.75 points; 2 of 8 gain 0.1: +2.50
    eq11 = "PST (Eq. 11) vs no PST at lambda 0.7: tau +10.0%, retention (quality, paired) -3.75"
    assert eq11 in per_set
    assert "PST ahead vs no PST at lambda 0.7: tau +4.0%, retention (quality, paired) +2.50" in out
    assert "lambda 0.9" not in out  # nothing without PST to pair it with
    assert "PST (Eq. 11) vs no PST at lambda 0.7: -3.75 points" in pooled
    assert "over 8 in 1 sets; higher in 0, lower in 1" in pooled


def test_the_judge_score_is_paired_on_request(tmp_path):
    out = _checked(tmp_path, "--score", "judge_score")
    # 4 of 8 lose 1 of an AR mean of 2.0: -25 points
    judged = "retention (judge_score, paired)"
    assert f"PST (Eq. 11) vs no PST at lambda 0.7: tau +10.0%, {judged} -25.00 points" in out
    assert f"PST ahead vs no PST at lambda 0.7: tau +4.0%, {judged} +0.00 points" in out


def test_sets_pool_across_results_folders(tmp_path):
    out = _checked(tmp_path, sets=2)
    assert "-3.75 points" in out and "over 16 in 2 sets; higher in 0, lower in 2" in out
    assert "+2.50 points" in out and "over 16 in 2 sets; higher in 2, lower in 0" in out


def test_a_sweep_without_pst_pairs_is_refused_naming_the_folder(tmp_path):
    results = tmp_path / "results"
    cells, scores = _sweep()
    _write(results, [c for c in cells if c["method"] != "nopst"], scores)
    out = _run(str(results))
    assert out.returncode != 0
    assert "no LVSpec cell with PST beside one without PST" in out.stderr
    assert str(results) in out.stderr
