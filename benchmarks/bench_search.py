"""How much of a method's frontier a search finds from a fraction of its grid, by optimizer.

Decodes three full toy grids of 60 points each in two toy worlds (`toy.seed` 0 and 1: other
samples, other trained models; world 0 starts from a copy of a finished tour's folder, so its
models are trained; world 1 trains its own), greedy:

- EAGLE-2's dynamic tree over the draft model (`eagle2_tree`: depth x top_k x total_tokens) on
  toy_caption; lossless, so its frontier is the fastest setting;
- LVSpec's loose verification (lambda x N x the chain's gamma) on toy_video, where relaxing
  costs quality (on toy_caption every point keeps all of it);
- LANTERN's relaxation over EAGLE-2 trees (delta x k x total_tokens) on toy_imagegen (quality:
  FID, lower is better).

Then replays searches over each grid's cells: the same `mmspec.search.optimizer.propose` the
workflow's rounds call, told what `stages/search_round.py` tells it (an objective's pessimistic
interval end), with a budget of 30% of the grid in rounds of 6 (`--per-round`). A proposed
point is looked up in the grid's cells table (the same cells where they coincide), so the
comparison is exact. It prints, per search, toy world and sampler, the hypervolume after each
round as a share of the full grid's (same reference point: the grid's worst value of each
objective, less 1% of its range) for search seed = toy seed, beside the median of 10 random
subsets of the same size; then each sampler's final share at search seeds `--search-seeds`.

    python benchmarks/bench_search.py --tour /path/to/finished/tour [--samplers tpe nsga2 gp]
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

from mmspec.search.optimizer import Finished, propose  # noqa: E402
from mmspec.sweep.hypervolume import hypervolume, reference  # noqa: E402
from mmspec.sweep.search_space import Domain, Objective, Search  # noqa: E402

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
        "lvspec", "toy_video", "toy_vdraft", {"views": "M"},
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


def grid_config(toy_seed: int) -> dict:
    """The tour's world at `toy_seed` with the three grids (and AR); greedy, so one sweep seed."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = {k: v for k, v in base.items() if k not in ("methods", "sweep", "seeds")}
    config["methods"] = {"ar": {}}
    config["sweep"] = []
    for name, (method, dataset, pair, fixed, domains, _) in SEARCHES.items():
        config["methods"][name] = {
            "method": method, **fixed, **{d.key: d.values() for d in domains}
        }  # fmt: skip
        config["sweep"].append({"datasets": [dataset], "pairs": [pair], "methods": ["ar", name]})
    config["seeds"] = [0]
    config["toy"] = {**config.get("toy", {}), "seed": toy_seed}
    return config


def run_grid(tour: Path, folder: Path, toy_seed: int) -> Path:
    """Decode the grids of world `toy_seed` (world 0 in a copy of the tour's results); the cells
    table's path."""
    folder.mkdir(parents=True, exist_ok=True)
    if toy_seed == 0 and not (folder / "results").exists():
        shutil.copytree(tour / "results", folder / "results", symlinks=True)
        shutil.copytree(tour / ".snakemake" / "metadata", folder / ".snakemake" / "metadata")
    config = folder / "grid.yaml"
    config.write_text(yaml.safe_dump(grid_config(toy_seed)))
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(folder), "--configfile", str(config), "--cores", "2", "--keep-going"],
        check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    print(f"world {toy_seed}: grids in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return folder / "results" / "summary" / "cells.parquet"


def grid_rows(cells: Path, name: str) -> dict[str, dict]:
    """point key -> the cell's row, for the grid `name`."""
    import pyarrow.parquet as pq

    _, _, _, fixed, domains, _ = SEARCHES[name]
    rows = {}
    for row in pq.read_table(cells).to_pylist():
        if row["method"] != name:
            continue
        hparams = json.loads(row["hparams"])
        point = {d.key: hparams[d.key] for d in domains}
        rows[json.dumps(point, sort_keys=True)] = row
    return rows


def search_of(name: str, budget: int, per_round: int, sampler: str, seed: int) -> Search:
    method, _, _, fixed, domains, objectives = SEARCHES[name]
    return Search(
        name=name,
        method=method,
        fixed=fixed,
        domains=tuple(sorted(domains, key=lambda d: d.key)),
        objectives=tuple(Objective(m) for m in objectives),
        constraints=(),
        budget=budget,
        per_round=per_round,
        seed=seed,
        sampler=sampler,
    )


def measured(row: dict, objectives: list[str]) -> tuple[float, ...]:
    """A cell's objectives as the report plots them, each turned to be maximized."""
    return tuple(
        row[m] if Objective(m).maximize else -row[m] for m in objectives
    )  # fmt: skip


def replay(
    name: str, rows: dict, sampler: str, seed: int, budget: int, per_round: int
) -> list[list[dict]]:
    """The rows each round of a search chose."""
    search = search_of(name, budget, per_round, sampler, seed)
    history: list[Finished] = []
    chosen = []
    for number in range(1, search.rounds + 1):
        points = propose(search, number, history)
        found = [rows[json.dumps(p, sort_keys=True)] for p in points]
        history += [Finished(p, number, r) for p, r in zip(points, found, strict=True)]
        chosen.append(found)
    return chosen


def report(
    cells: Path, name: str, seed: int, samplers: list[str], search_seeds: list[int], per_round: int
) -> dict:
    """The table of one grid in one toy world: hypervolume share per sampler and round (search
    seed = toy seed), then each sampler's final share over `search_seeds`; returns the latter's
    medians by sampler (and the random subsets' as `subsets`)."""
    _, _, _, _, domains, objectives = SEARCHES[name]
    rows = grid_rows(cells, name)
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
    rounds = math.ceil(budget / per_round)
    print(
        f"\n{name}, toy seed {seed}: grid {grid} cells, budget {budget} ({SHARE:.0%}), "
        f"objectives {objectives}, reference {tuple(round(x, 4) for x in ref)}\n"
        f"  random subsets of {budget}: median {statistics.median(randoms):.3f} "
        f"(min {min(randoms):.3f}, max {max(randoms):.3f}) of the grid's hypervolume\n"
        "  sampler   " + "  ".join(f"round {i + 1:<2}" for i in range(rounds)) + "  cells  seconds"
    )
    for sampler in samplers:
        start = time.perf_counter()
        chosen = replay(name, rows, sampler, seed, budget, per_round)
        seconds = time.perf_counter() - start
        seen, shares = [], []
        for found in chosen:
            seen += found
            shares.append(share(seen))
        cells_text = "  ".join(f"{s:8.3f}" for s in shares)
        print(f"  {sampler:<8}  {cells_text}  {len(seen):5d}  {seconds:7.1f}", flush=True)
    medians = {"subsets": statistics.median(randoms)}
    for sampler in samplers if len(search_seeds) > 1 else []:
        finals = [
            share([r for found in replay(name, rows, sampler, s, budget, per_round) for r in found])
            for s in search_seeds
        ]
        medians[sampler] = statistics.median(finals)
        print(
            f"  {sampler:<8}  search seeds {search_seeds[0]}-{search_seeds[-1]}: final "
            + " ".join(f"{f:.3f}" for f in finals)
            + f"; median {medians[sampler]:.3f}, min {min(finals):.3f}, "
            f"{sum(f >= 0.95 for f in finals)} of {len(finals)} at 0.95 or more",
            flush=True,
        )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tour", type=Path, required=True, help="a finished tour's folder")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench_search"))
    # qnehvi and gp are slow here (docs/performance.md): ask for them by name
    parser.add_argument("--samplers", nargs="*", default=["tpe", "nsga2", "random"])
    parser.add_argument("--seeds", type=int, nargs="*", default=SEEDS, help="toy worlds")
    parser.add_argument("--searches", nargs="*", default=list(SEARCHES))
    parser.add_argument("--per-round", type=int, default=PER_ROUND, help="points per round")
    parser.add_argument(
        "--search-seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4],
        help="optimizer seeds of the robustness lines (round tables: search seed = toy seed)",
    )  # fmt: skip
    args = parser.parse_args()
    worlds = {
        seed: run_grid(args.tour.resolve(), args.folder / f"world-{seed}", seed)
        for seed in args.seeds
    }
    medians = {}
    for name in args.searches:
        for seed, cells in worlds.items():
            medians[name, seed] = report(
                cells, name, seed, args.samplers, args.search_seeds, args.per_round
            )
    if len(args.search_seeds) > 1 and args.samplers:
        print("\nmedian final share over search seeds, by grid and toy world")
        print("  grid           world  subsets  " + "  ".join(f"{s:>7}" for s in args.samplers))
        for (name, seed), found in medians.items():
            cols = "  ".join(f"{found[s]:7.3f}" for s in args.samplers)
            print(f"  {name:<14} {seed:>5}  {found['subsets']:7.3f}  {cols}")


if __name__ == "__main__":
    main()
