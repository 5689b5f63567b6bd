"""LVSpec's claims checked on finished sweeps (toy_lvspec.yaml, or any sweep of LVSpec beside the
visually blind baselines), one block per (results folder, dataset, pair, temperature):

- tau rises with lambda, for each PST variant (none, Eq. 11's whole step, `pst_ahead`,
  `pst_range`);
- lambda 0 without PST is exact SD: lossless_rate 1 and the tau of the exact chain of the same
  gamma;
- retention at `--lam` (0.7, the paper's) for each variant, with its 95% bootstrap interval,
  against `--floor` (0.97);
- dominance (LVSpec's Figure 7): for every FLy, FLY-minus and random relaxation point, an LVSpec
  point at least as fast (tau) with retention at least as high, by the task metric and by the
  judge; over every LVSpec point, over the paper's variants (without PST and Eq. 11's) and over
  those without PST (the figure's); each baseline point that is not dominated is listed with its
  margin and both intervals;
- each PST variant against no PST at the same lambda: the change in tau, and the change in
  retention paired per sample-turn (quality difference / the set's AR mean) with a 95% bootstrap
  interval; pooled over every set given at the end.

    python analysis/lvspec/acceptance.py results/ [other_run/results/ ...]

Reads only what the workflow wrote (results/summary/cells.parquet and results/score/); nothing
is decoded again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from mmspec.config import Cell
from mmspec.stages.aggregate import percentile_interval

BASELINES = ("fly", "fly_gate", "random_relax")
RETENTIONS = (("retention", "quality"), ("judge_retention", "judge_score"))  # cells, scores
PAPER_VARIANTS = ("no PST", "PST (Eq. 11)")
TIE = 1e-9  # two means of the same scores, summed in another order, are equal


def variant(h: dict) -> str:
    """The PST variant of an LVSpec cell's hyperparameters."""
    if not h.get("pst"):
        return "no PST"
    if h.get("pst_ahead"):
        return "PST ahead" if h.get("pst_range") is None else f"PST ahead, range {h['pst_range']}"
    return "PST (Eq. 11)" if h.get("pst_range") is None else f"PST range {h['pst_range']}"


def load_cells(results: Path) -> pd.DataFrame:
    cells = pd.read_parquet(results / "summary" / "cells.parquet")
    h = cells["hparams"].map(json.loads)
    return cells.assign(
        lam=h.map(lambda x: x.get("lvspec_lambda")),
        variant=h.map(variant),
        gamma_=h.map(lambda x: x.get("gamma")),
        results=str(results),
    )


def scores_of(row: pd.Series) -> pd.DataFrame:
    cell = Cell(row["dataset"], row["pair"], row["method"], row["hp"], int(row["seed"]), {})
    path = Path(row["results"]) / "score" / cell.path / "scores.parquet"
    return pd.read_parquet(path).set_index(["sample_id", "turn"]).sort_index()


def interval(values: np.ndarray, rng: np.random.Generator, resamples: int = 4000):
    """The bootstrap interval of the mean of `values`."""
    picks = rng.integers(0, len(values), (resamples, len(values)))
    return percentile_interval(values[picks].mean(1))


def paired(a: pd.Series, b: pd.Series, score: str) -> np.ndarray:
    """Per sample-turn (a's quality - b's) / the AR mean, over turns both scored."""
    sa = scores_of(a)
    sb = scores_of(b).reindex(sa.index)
    both = sa[score].notna() & sb[score].notna() & sa[f"ar_{score}"].notna()
    return ((sa[score] - sb[score])[both] / sa.loc[both, f"ar_{score}"].mean()).to_numpy()


def fmt(row: pd.Series, col: str) -> str:
    return f"{row[col]:.3f} [{row[f'{col}_low']:.3f}, {row[f'{col}_high']:.3f}]"


def check_group(g: pd.DataFrame, args, pooled: dict, rng) -> None:
    lv = g[g["acceptance"] == "lvspec"]
    for name, v in lv.groupby("variant", sort=True):
        v = v.sort_values("lam")
        rising = bool((np.diff(v["tau"].to_numpy()) > 0).all())
        taus = ", ".join(f"{lam:g}: {t:.2f}" for lam, t in zip(v["lam"], v["tau"], strict=True))
        print(f"  {name}: tau by lambda {taus} -> {'rises' if rising else 'DOES NOT RISE'}")
    zero = lv[(lv["variant"] == "no PST") & (lv["lam"] == 0)]
    exact = g[(g["acceptance"] == "greedy") & g["tree"].eq("chain")]
    for _, z in zero.iterrows():
        sd = exact[exact["gamma_"] == z["gamma_"]]
        same = not sd.empty and np.isclose(sd["tau"].iloc[0], z["tau"])
        print(
            f"  lambda 0: lossless_rate {z['lossless_rate']:.3f}, tau {z['tau']:.3f}"
            f" (exact chain: {sd['tau'].iloc[0] if not sd.empty else float('nan'):.3f})"
            f" -> {'SD exactly' if z['lossless_rate'] == 1 and same else 'NOT SD'}"
        )
    for _, row in lv[np.isclose(lv["lam"], args.lam)].sort_values("variant").iterrows():
        verdicts = []
        for col, _ in RETENTIONS:
            if pd.notna(row[col]):
                ok = "holds" if row[col] >= args.floor else "FAILS"
                verdicts.append(f"{col} {fmt(row, col)} {ok}")
        print(f"  lambda {args.lam:g}, {row['variant']}: " + "; ".join(verdicts))
    base = g[g["acceptance"].isin(BASELINES)]
    scopes = (
        ("every LVSpec point", lv),
        ("the paper's (no PST, Eq. 11)", lv[lv["variant"].isin(PAPER_VARIANTS)]),
        ("without PST", lv[lv["variant"] == "no PST"]),
    )
    for scope, pts in scopes:
        for col, _ in RETENTIONS:
            if base[col].isna().all() or pts.empty:
                continue
            misses = []
            for _, b in base.iterrows():
                faster = pts[pts["tau"] >= b["tau"]]
                best = faster.loc[faster[col].idxmax()] if not faster.empty else None
                if best is None or best[col] < b[col] - TIE:
                    misses.append((b, best))
            print(
                f"  dominance by {col}, {scope}: "
                + ("holds" if not misses else f"FAILS at {len(misses)} of {len(base)}")
            )
            for b, best in misses:
                against = (
                    "no LVSpec point as fast"
                    if best is None
                    else f"best as fast: {best['method']} lambda {best['lam']:g} tau "
                    f"{best['tau']:.2f} {fmt(best, col)}, margin {b[col] - best[col]:.3f}"
                )
                print(f"    {b['method']} {b['hp']} tau {b['tau']:.2f} {fmt(b, col)}; {against}")
    plain = {r["lam"]: r for _, r in lv[lv["variant"] == "no PST"].iterrows()}
    for _, row in lv[lv["variant"] != "no PST"].sort_values(["variant", "lam"]).iterrows():
        if row["lam"] not in plain:
            continue
        ref = plain[row["lam"]]
        diffs = paired(row, ref, "quality")
        lo, hi = interval(diffs, rng)
        key = (row["variant"], row["lam"])
        pooled.setdefault(key, []).append(diffs)
        print(
            f"  {row['variant']} vs no PST at lambda {row['lam']:g}: tau "
            f"{100 * (row['tau'] / ref['tau'] - 1):+.1f}%, retention (metric, paired) "
            f"{100 * diffs.mean():+.2f} points [{100 * lo:+.2f}, {100 * hi:+.2f}]"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", type=Path, help="results folders of finished sweeps")
    p.add_argument("--lam", type=float, default=0.7, help="lambda of the retention check")
    p.add_argument("--floor", type=float, default=0.97, help="the retention to keep there")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    pooled: dict = {}
    for results in args.results:
        cells = load_cells(results)
        for key, g in cells.groupby(["dataset", "pair", "temperature"], sort=True):
            if not (g["acceptance"] == "lvspec").any():
                continue
            print(f"{results} · {key[0]} · {key[1]} · T={key[2]:g}")
            check_group(g, args, pooled, rng)
    if pooled:
        print("pooled over every set (paired per sample-turn):")
    for (name, lam), parts in sorted(pooled.items()):
        diffs = np.concatenate(parts)
        lo, hi = interval(diffs, rng)
        print(
            f"  {name} vs no PST at lambda {lam:g}: {100 * diffs.mean():+.2f} points "
            f"[{100 * lo:+.2f}, {100 * hi:+.2f}] over {len(diffs)} in {len(parts)} sets; "
            f"higher in {sum(d.mean() > TIE for d in parts)}, lower in "
            f"{sum(d.mean() < -TIE for d in parts)}"
        )


if __name__ == "__main__":
    main()
