"""analysis/lvspec/acceptance.py on a results folder written here: its verdicts follow the
cells, and PST's paired change is computed from the score tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "analysis" / "lvspec" / "acceptance.py"
SAMPLES = 8


def _cell(method, hp, acceptance, tau, retention, **hparams):
    return {
        "dataset": "vd",
        "pair": "p",
        "method": method,
        "hp": hp,
        "hparams": json.dumps({"acceptance": acceptance, "gamma": 10, **hparams}),
        "seed": 0,
        "acceptance": acceptance,
        "tree": "chain",
        "temperature": 0.0,
        "tau": tau,
        "lossless_rate": 1.0 if retention == 1.0 and acceptance != "random_relax" else None,
        "retention": retention,
        "retention_low": retention - 0.02,
        "retention_high": retention + 0.02,
        "judge_retention": retention,
        "judge_retention_low": retention - 0.02,
        "judge_retention_high": retention + 0.02,
    }


def _write(results: Path, cells: list[dict], qualities: dict[tuple[str, str], list[float]]):
    (results / "summary").mkdir(parents=True)
    pd.DataFrame(cells).to_parquet(results / "summary" / "cells.parquet")
    for (method, hp), quality in qualities.items():
        folder = results / "score" / "dataset=vd" / "pair=p" / f"method={method}" / f"hp={hp}"
        (folder / "seed=0").mkdir(parents=True)
        pd.DataFrame(
            {
                "sample_id": [f"s{i}" for i in range(SAMPLES)],
                "turn": 0,
                "quality": quality,
                "ar_quality": 1.0,
                "judge_score": quality,
                "ar_judge_score": 1.0,
            }
        ).to_parquet(folder / "seed=0" / "scores.parquet")


def _run(*folders: Path) -> str:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, folders)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _sweep(random_retention: float) -> tuple[list[dict], dict]:
    lv = {"lvspec_n": 10, "views": "M"}
    cells = [
        _cell("sd10", "gamma-10", "greedy", 2.9, 1.0),
        _cell("nopst", "l0", "lvspec", 2.9, 1.0, lvspec_lambda=0.0, pst=False, **lv),
        _cell("nopst", "l5", "lvspec", 4.0, 0.99, lvspec_lambda=0.5, pst=False, **lv),
        _cell("nopst", "l7", "lvspec", 5.5, 0.98, lvspec_lambda=0.7, pst=False, **lv),
        _cell("pst", "l7", "lvspec", 5.8, 0.955, lvspec_lambda=0.7, pst=True, **lv),
        _cell("fly", "e1", "fly", 3.0, 0.97, fly_entropy=0.1, fly_window=4),
        _cell("random", "r5", "random_relax", 4.5, random_retention, relax_rho=0.5),
    ]
    # PST keeps one fact fewer in 3 of 8 descriptions (each AR quality 1.0)
    plain = [1.0] * SAMPLES
    qualities = {("nopst", "l7"): plain, ("pst", "l7"): [0.9, 0.9, 0.9] + plain[3:]}
    return cells, qualities


def _checked(tmp_path: Path, random_retention: float, sets: int = 1) -> str:
    """The script's output over `sets` results folders of the sweep above."""
    folders = [tmp_path / f"results{i}" for i in range(sets)]
    for folder in folders:
        _write(folder, *_sweep(random_retention))
    return _run(*folders)


def test_the_verdicts_follow_the_cells(tmp_path):
    out = _checked(tmp_path, random_retention=0.95)
    assert "no PST: tau by lambda 0: 2.90, 0.5: 4.00, 0.7: 5.50 -> rises" in out
    assert "lossless_rate 1.000, tau 2.900 (exact chain: 2.900) -> SD exactly" in out
    assert "lambda 0.7, no PST: retention 0.980 [0.960, 1.000] holds" in out
    assert "lambda 0.7, PST (Eq. 11): retention 0.955 [0.935, 0.975] FAILS" in out
    assert "dominance by retention, every LVSpec point: holds" in out
    # 3 of 8 descriptions lose 0.1 of an AR mean of 1.0: -3.75 points
    pst = "PST (Eq. 11) vs no PST at lambda 0.7: tau +5.5%, retention (metric, paired) -3.75"
    assert pst in out
    assert "-3.75 points" in out.split("pooled over every set")[1]


def test_an_undominated_baseline_is_named_with_its_margin(tmp_path):
    out = _checked(tmp_path, random_retention=0.995)
    assert "dominance by retention, every LVSpec point: FAILS at 1 of 2" in out
    assert "random r5 tau 4.50 0.995 [0.975, 1.015]; best as fast: nopst lambda 0.7" in out
    assert "margin 0.015" in out


def test_sets_pool_across_results_folders(tmp_path):
    out = _checked(tmp_path, random_retention=0.95, sets=2)
    assert "-3.75 points" in out and "over 16 in 2 sets; higher in 0, lower in 2" in out


def test_equal_retentions_summed_in_another_order_count_as_dominated(tmp_path):
    out = _checked(tmp_path, random_retention=0.98 + 1e-12)  # lambda 0.7 keeps 0.98 at tau 5.5
    assert "dominance by retention, every LVSpec point: holds" in out
