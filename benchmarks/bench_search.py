"""How much of a method's frontier a search finds from a fraction of its grid, by optimizer.

Decodes three full toy grids of 60 points each (in a copy of a finished tour's folder, so the
models are trained) at seeds 0 and 1:

- EAGLE-2's dynamic tree over the draft model (`eagle2_tree`: depth x top_k x total_tokens) on
  toy_caption; lossless, so its frontier is the fastest setting;
- LVSpec's loose verification (lambda x N x the chain's gamma) on toy_caption;
- LANTERN's relaxation over EAGLE-2 trees (delta x k x total_tokens) on toy_imagegen (quality:
  FID, lower is better).

Then replays searches over each grid's cells: the same `mmspec.search.optimizer.propose` the
workflow's rounds call, told what `stages/search_round.py` tells it (an objective's pessimistic
interval end), with a budget of 30% of the grid in rounds of 6. A proposed point is looked up
in the grid's cells table (the same cells where they coincide), so the comparison is exact.
It prints, per search, seed and sampler, the hypervolume after each round as a share of the full
grid's (same reference point: the grid's worst value of each objective, less 1% of its range),
beside the median of 10 random subsets of the same size.

    python benchmarks/bench_search.py --tour /path/to/finished/tour [--samplers tpe nsga2 qnehvi]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mmspec.search.hypervolume import hypervolume, reference  # noqa: E402
from mmspec.search.optimizer import Finished, propose  # noqa: E402
from mmspec.search.space import Domain, Objective, Search  # noqa: E402

SEEDS = [0, 1]
SHARE = 0.3  # of the grid's points
PER_ROUND = 6
RANDOM_SUBSETS = 10

# name -> (registry method, dataset, pair, fixed values, domains, objectives); every domain is
# finite and its values are the grid's, so every proposed point is a grid point
SEARCHES = {
    "eagle2_tree": (
        "eagle2_tree", "toy_caption", "toy_vdraft", {},
        [Domain("depth", low=2, high=6, integer=True), Domain("top_k", choices=(2, 4, 8)),
         Domain("total_tokens", choices=(4, 8, 16, 32))],
        ["speedup", "quality"],
    ),
    "lvspec": (
        "lvspec", "toy_caption", "toy_vdraft", {"views": "M"},
        [Domain("lvspec_lambda", low=0.1, high=0.9, step=0.2),
         Domain("lvspec_n", choices=(1, 4, 16)), Domain("gamma", choices=(4, 6, 8, 10))],
        ["speedup", "quality"],
    ),
    "lantern_tree": (
        "lantern_tree", "toy_imagegen", "toy_image", {},
        [Domain("lantern_delta", choices=(0.05, 0.1, 0.2, 0.3, 0.4)),
         Domain("lantern_k", choices=(4, 8, 16, 32)), Domain("total_tokens", choices=(4, 8, 16))],
        ["speedup", "fid"],
    ),
}  # fmt: skip


def grid_config() -> dict:
    """The tour's world with the three grids (and AR) at both seeds."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = {k: v for k, v in base.items() if k not in ("methods", "sweep", "seeds")}
    config["methods"] = {"ar": {}}
    config["sweep"] = []
    for name, (method, dataset, pair, fixed, domains, _) in SEARCHES.items():
        config["methods"][name] = {
            "method": method, **fixed, **{d.key: d.values() for d in domains}
        }  # fmt: skip
        config["sweep"].append({"datasets": [dataset], "pairs": [pair], "methods": ["ar", name]})
    config["seeds"] = SEEDS
    return config


def run_grid(tour: Path, folder: Path) -> Path:
    """Decode the grids in a copy of the tour's results; the cells table's path."""
    if not (folder / "results").exists():
        shutil.copytree(tour / "results", folder / "results", symlinks=True)
        shutil.copytree(tour / ".snakemake" / "metadata", folder / ".snakemake" / "metadata")
    config = folder / "grid.yaml"
    config.write_text(yaml.safe_dump(grid_config()))
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(folder), "--configfile", str(config), "--cores", "2", "--keep-going"],
        check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    print(f"grids decoded in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return folder / "results" / "summary" / "cells.parquet"


def grid_rows(cells: Path, name: str, seed: int) -> dict[str, dict]:
    """point key -> the cell's row, for the grid `name` at `seed`."""
    import pyarrow.parquet as pq

    _, _, _, fixed, domains, _ = SEARCHES[name]
    rows = {}
    for row in pq.read_table(cells).to_pylist():
        if row["method"] != name or row["seed"] != seed:
            continue
        hparams = json.loads(row["hparams"])
        point = {d.key: hparams[d.key] for d in domains}
        rows[json.dumps(point, sort_keys=True)] = row
    return rows


def search_of(name: str, budget: int, sampler: str, seed: int) -> Search:
    method, _, _, fixed, domains, objectives = SEARCHES[name]
    return Search(
        name=name,
        method=method,
        fixed=fixed,
        domains=tuple(sorted(domains, key=lambda d: d.key)),
        objectives=tuple(Objective(m) for m in objectives),
        constraints=(),
        budget=budget,
        per_round=PER_ROUND,
        seed=seed,
        sampler=sampler,
    )


def measured(row: dict, objectives: list[str]) -> tuple[float, ...]:
    """A cell's objectives as the report plots them, each turned to be maximized."""
    return tuple(
        row[m] if Objective(m).maximize else -row[m] for m in objectives
    )  # fmt: skip


def replay(name: str, rows: dict, sampler: str, seed: int, budget: int) -> list[list[dict]]:
    """The rows each round of a search chose."""
    search = search_of(name, budget, sampler, seed)
    history: list[Finished] = []
    chosen = []
    for number in range(1, search.rounds + 1):
        points = propose(search, number, history)
        found = [rows[json.dumps(p, sort_keys=True)] for p in points]
        history += [Finished(p, number, r) for p, r in zip(points, found, strict=True)]
        chosen.append(found)
    return chosen


def report(cells: Path, name: str, seed: int, samplers: list[str]) -> None:
    """The table of one grid at one toy seed: hypervolume share per sampler and round."""
    _, _, _, _, domains, objectives = SEARCHES[name]
    rows = grid_rows(cells, name, seed)
    grid = math.prod(len(d.values()) for d in domains)
    assert len(rows) == grid, f"{name} seed {seed}: {len(rows)} of {grid} cells"
    budget = int(SHARE * grid)
    ref = reference([measured(r, objectives) for r in rows.values()])

    def volume(chosen) -> float:
        return hypervolume([measured(r, objectives) for r in chosen], ref)

    full = volume(rows.values())

    def share(chosen) -> float:
        return volume(chosen) / full

    rng = random.Random(1000 + seed)
    randoms = [share(rng.sample(list(rows.values()), budget)) for _ in range(RANDOM_SUBSETS)]
    rounds = math.ceil(budget / PER_ROUND)
    print(
        f"\n{name}, toy seed {seed}: grid {grid} cells, budget {budget} ({SHARE:.0%}), "
        f"objectives {objectives}, reference {tuple(round(x, 4) for x in ref)}\n"
        f"  random subsets of {budget}: median {statistics.median(randoms):.3f} "
        f"(min {min(randoms):.3f}, max {max(randoms):.3f}) of the grid's hypervolume\n"
        "  sampler   " + "  ".join(f"round {i + 1:<2}" for i in range(rounds)) + "  cells  seconds"
    )
    for sampler in samplers:
        start = time.perf_counter()
        chosen = replay(name, rows, sampler, seed, budget)
        seconds = time.perf_counter() - start
        seen, shares = [], []
        for found in chosen:
            seen += found
            shares.append(share(seen))
        cells_text = "  ".join(f"{s:8.3f}" for s in shares)
        print(f"  {sampler:<8}  {cells_text}  {len(seen):5d}  {seconds:7.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tour", type=Path, required=True, help="a finished tour's folder")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_search"))
    parser.add_argument("--samplers", nargs="*", default=["tpe", "nsga2", "qnehvi"])
    parser.add_argument("--seeds", type=int, nargs="*", default=SEEDS, help="toy seeds replayed")
    parser.add_argument("--searches", nargs="*", default=list(SEARCHES))
    args = parser.parse_args()
    cells = run_grid(args.tour.resolve(), args.folder)
    for name in args.searches:
        for seed in args.seeds:
            report(cells, name, seed, args.samplers)


if __name__ == "__main__":
    main()
