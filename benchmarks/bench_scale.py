"""What a sweep of 10 000 to 100 000 cells costs before its first job, and to rerun once done.

Builds sweeps from the tour's world (3 datasets x the toy_vdraft pair x {AR, SD over views
M/T/C/P x 13 gammas, SD over view U x 13 gammas x 9 keeps} = 510 cells per seed, seeds added
to reach a size) and times, in a copy of a finished tour's folder (`--tour`, so upstream outputs
exist as they do for a user extending a finished sweep):

- `mmspec cells` (validation and expansion),
- `snakemake -n` (a dry run, every job printed; it writes nothing), twice,
- `mmspec plan` (cells done and to run, jobs, device hours),

and, with `--finish N`, runs an N-cell sweep of tiny cells (1 sample of 4 tokens each; datasets
toy_caption, toy_vqa, toy_story, none judged) to the end
and times its no-op rerun (`snakemake --cores 2` with nothing to do) and the dry run of
`--profile slurm`, whose packing of jobs into groups is part of its plan.

    python benchmarks/bench_scale.py --tour /path/to/finished/tour --cells 10000 30000 100000
    python benchmarks/bench_scale.py --tour /path/to/finished/tour --finish 10000
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GAMMAS = list(range(1, 14))
KEEPS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
DATASETS = ["toy_caption", "toy_vqa", "toy_video"]
# the finished sweep's: no judged dataset, whose embedded judge would triple the finishing run
FINISH_DATASETS = ["toy_caption", "toy_vqa", "toy_story"]
PER_SEED = len(DATASETS) * (1 + 4 * len(GAMMAS) + len(GAMMAS) * len(KEEPS))


def sweep(cells: int, tiny: bool = False, datasets: list[str] = DATASETS) -> dict:
    """The tour's world with a sweep of about `cells` cells (a multiple of PER_SEED)."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config = {k: v for k, v in base.items() if k not in ("methods", "sweep", "seeds")}
    methods: dict = {"ar": {}}
    for view in "MTCP":
        methods[f"sd_{view.lower()}"] = {"method": "sd", "views": view, "gamma": GAMMAS}
    methods["sd_u"] = {"method": "sd", "views": "U", "gamma": GAMMAS, "keep": KEEPS}
    config["methods"] = methods
    config["seeds"] = list(range(max(1, math.ceil(cells / PER_SEED))))
    config["sweep"] = [{"datasets": datasets, "pairs": ["toy_vdraft"], "methods": list(methods)}]
    if tiny:  # a finished sweep cheaply: one short sample per cell
        for name in datasets:
            config["datasets"][name] = {**config["datasets"][name], "samples": 1}
        config["generation"] = {**config["generation"], "max_new_tokens": 4}
        config["timing"] = {**config["timing"], "warmup_samples": 0}
    return config


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])}... failed:\n{out.stderr[-3000:]}")
    return seconds, out.stdout + out.stderr


def snakemake(folder: Path, config: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
        str(folder), "--configfile", str(config), "--cores", "2", *extra,
    ]  # fmt: skip


def mmspec(*args: str) -> list[str]:
    return [sys.executable, "-m", "mmspec", *args]


def copy_tour(tour: Path, folder: Path) -> None:
    """The finished tour's results (not its batches' specs or logs) in a scratch folder."""
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(tour / "results", folder / "results", symlinks=True)
    shutil.copytree(tour / ".snakemake" / "metadata", folder / ".snakemake" / "metadata")


def jobs_of(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("total"):
            return int(line.split()[-1])
    return 0


def plan_cost(tour: Path, scratch: Path, cells: int) -> None:
    folder = scratch / f"plan-{cells}"
    copy_tour(tour, folder)
    config = folder / "sweep.yaml"
    config.write_text(yaml.safe_dump(sweep(cells)))
    n = PER_SEED * len(sweep(cells)["seeds"])
    seconds, _ = timed(mmspec("cells", str(config)), folder)
    print(f"{n:>7} cells: mmspec cells {seconds:6.1f} s ({seconds / n * 1000:.2f} s per 1 000)")
    for attempt in ("first", "again"):
        seconds, text = timed(snakemake(folder, config, "-n"), folder)
        print(
            f"{n:>7} cells: snakemake -n ({attempt}) {seconds:6.1f} s, {jobs_of(text)} jobs "
            f"({seconds / n * 1000:.2f} s per 1 000 cells)"
        )
    seconds, text = timed(mmspec("plan", str(config), "--profile", str(ROOT / "slurm")), folder)
    print(f"{n:>7} cells: mmspec plan {seconds:6.1f} s ({seconds / n * 1000:.2f} s per 1 000)")
    print("    " + text.splitlines()[0])
    shutil.rmtree(folder)


def finish(tour: Path, scratch: Path, cells: int) -> None:
    folder = scratch / f"finish-{cells}"
    copy_tour(tour, folder)
    config = folder / "sweep.yaml"
    config.write_text(yaml.safe_dump(sweep(cells, tiny=True, datasets=FINISH_DATASETS)))
    n = PER_SEED * len(sweep(cells)["seeds"])
    seconds, _ = timed(snakemake(folder, config), folder)
    print(f"{n:>7} cells: the run, tiny cells, {seconds:7.1f} s")
    seconds, text = timed(snakemake(folder, config), folder)
    assert "Nothing to be done" in text, text[-2000:]
    print(f"{n:>7} cells: no-op rerun {seconds:6.1f} s ({seconds / n * 1000:.2f} s per 1 000)")
    profile = ["--profile", str(ROOT / "slurm"), "-n"]
    seconds, text = timed(snakemake(folder, config, *profile), folder)
    print(f"{n:>7} cells: --profile slurm -n, nothing to do, {seconds:6.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tour", type=Path, required=True, help="a finished tour's folder")
    parser.add_argument("--cells", type=int, nargs="*", default=[10000, 30000, 100000])
    parser.add_argument("--finish", type=int, help="run a sweep of about N tiny cells, then rerun")
    parser.add_argument("--scratch", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    args = parser.parse_args()
    if args.finish:
        finish(args.tour.resolve(), args.scratch, args.finish)
        return
    for cells in args.cells:
        plan_cost(args.tour.resolve(), args.scratch, cells)


if __name__ == "__main__":
    main()
