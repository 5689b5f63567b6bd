"""Does position-shift tolerance (PST) cost quality? Each PST variant of LVSpec against LVSpec
without PST at the same lambda, on finished sweeps (toy_lvspec.yaml, or any sweep with both):

- the change in tau;
- the change in retention paired per sample-turn: (the variant's quality - no PST's quality) /
  the set's AR mean, with a 95% bootstrap interval. Pairing removes the spread between samples,
  which a comparison of the two cells' retention intervals keeps;
- pooled over every set of every folder given (one per toy seed), with how many sets moved up
  and down.

Variants: Eq. 11's PST (`pst`), PST looking only ahead of the mismatch (`pst_ahead`) and each
`pst_range`. `mmspec claims` checks the paper's claims themselves (tau rising with lambda,
retention at lambda 0.7, PST raising tau, the frontier); this is the paired view behind them.

    python analysis/lvspec/pst_retention.py results/ [other_run/results/ ...] [--score quality]

Reads only what the workflow wrote (results/summary/cells.parquet and results/score/); nothing
is decoded again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from mmspec.stages.aggregate import percentile_interval
from mmspec.sweep.cells import Cell

TIE = 1e-9  # two means of the same scores, summed in another order, are equal


def variant(h: dict) -> str:
    """The PST variant of an LVSpec cell's hyperparameters."""
    if not h.get("pst"):
        return "no PST"
    if h.get("pst_ahead"):
        return "PST ahead" if h.get("pst_range") is None else f"PST ahead, range {h['pst_range']}"
    return "PST (Eq. 11)" if h.get("pst_range") is None else f"PST range {h['pst_range']}"


def lvspec_cells(results: Path) -> pd.DataFrame:
    """The LVSpec cells of a results folder, with their lambda and PST variant."""
    cells = pd.read_parquet(results / "summary" / "cells.parquet")
    cells = cells[cells["acceptance"] == "lvspec"]
    h = cells["hparams"].map(json.loads)
    return cells.assign(
        lam=h.map(lambda x: x.get("lvspec_lambda")),
        variant=h.map(variant),
        results=str(results),
    )


def scores_of(row: pd.Series) -> pd.DataFrame:
    cell = Cell(row["dataset"], row["pair"], row["method"], row["hp"], int(row["seed"]), {})
    path = Path(row["results"]) / "score" / cell.path / "scores.parquet"
    return pd.read_parquet(path).set_index(["sample_id", "turn"]).sort_index()


def paired(a: pd.Series, b: pd.Series, score: str) -> np.ndarray:
    """Per sample-turn (a's score - b's) / the AR mean, over the turns both scored."""
    sa = scores_of(a)
    sb = scores_of(b).reindex(sa.index)
    both = sa[score].notna() & sb[score].notna() & sa[f"ar_{score}"].notna()
    return ((sa[score] - sb[score])[both] / sa.loc[both, f"ar_{score}"].mean()).to_numpy()


def interval(values: np.ndarray, rng: np.random.Generator, resamples: int = 4000):
    """The bootstrap interval of the mean of `values`."""
    picks = rng.integers(0, len(values), (resamples, len(values)))
    return percentile_interval(values[picks].mean(1))


def points(diffs: np.ndarray, rng: np.random.Generator) -> str:
    lo, hi = interval(diffs, rng)
    return f"{100 * diffs.mean():+.2f} points [{100 * lo:+.2f}, {100 * hi:+.2f}]"


def compare_set(lv: pd.DataFrame, score: str, pooled: dict, rng) -> None:
    plain = {r["lam"]: r for _, r in lv[lv["variant"] == "no PST"].iterrows()}
    for _, row in lv[lv["variant"] != "no PST"].sort_values(["variant", "lam"]).iterrows():
        if row["lam"] not in plain:
            continue
        ref = plain[row["lam"]]
        diffs = paired(row, ref, score)
        pooled.setdefault((row["variant"], row["lam"]), []).append(diffs)
        print(
            f"  {row['variant']} vs no PST at lambda {row['lam']:g}: tau "
            f"{100 * (row['tau'] / ref['tau'] - 1):+.1f}%, retention ({score}, paired) "
            f"{points(diffs, rng)}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="results folders of finished sweeps")
    p.add_argument(
        "--score",
        default="quality",
        help="the score column to pair: quality (the task metric) or judge_score",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    pooled: dict = {}
    for results in args.results:
        cells = lvspec_cells(results)
        for key, g in cells.groupby(["dataset", "pair", "temperature"], sort=True):
            print(f"{results} · {key[0]} · {key[1]} · T={key[2]:g}")
            compare_set(g, args.score, pooled, rng)
    if not pooled:
        raise SystemExit(
            f"no LVSpec cell with PST beside one without PST at the same lambda in "
            f"{', '.join(map(str, args.results))}"
        )
    print("pooled over every set (paired per sample-turn):")
    for (name, lam), parts in sorted(pooled.items()):
        diffs = np.concatenate(parts)
        print(
            f"  {name} vs no PST at lambda {lam:g}: {points(diffs, rng)} over {len(diffs)} in "
            f"{len(parts)} sets; higher in {sum(d.mean() > TIE for d in parts)}, lower in "
            f"{sum(d.mean() < -TIE for d in parts)}"
        )


if __name__ == "__main__":
    main()
