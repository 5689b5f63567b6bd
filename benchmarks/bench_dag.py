"""Time and peak memory of Snakemake's dry run of an N-cell sweep (the DAG's scale).

Writes a toy config with `cells` cells (2 toy datasets x seeds x {ar, sd at gamma 1..99}), runs
`snakemake -n` on it in a scratch directory, and prints the wall time and peak RSS per size.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def config(cells: int) -> dict:
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    per_seed = 2 * 100  # 2 datasets x (ar + 99 gammas)
    return {
        "seeds": list(range(max(1, cells // per_seed))),
        "toy": base["toy"],
        "datasets": {name: {"source": "toy", "samples": 4} for name in ("toy_caption", "toy_vqa")},
        "pairs": {"toy": {"target": "toy:target", "draft": "toy:draft"}},
        "methods": {"ar": {}, "sd": {"views": ["M"], "gamma": list(range(1, 100))}},
    }


def dry_run(cells: int, profile: str | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "sweep.yaml"
        path.write_text(yaml.safe_dump(config(cells)))
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "-n",
            "--quiet",
            "--cores",
            "2",
            "--directory",
            scratch,
            "--configfile",
            str(path),
        ]
        if profile:  # e.g. slurm: its job groups are part of the plan
            cmd += ["--profile", str(ROOT / profile)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return seconds, peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, nargs="+", default=[5000, 10000])
    parser.add_argument("--profile", help="a profile folder of the repository, e.g. slurm")
    args = parser.parse_args()
    for cells in args.cells:
        seconds, peak_mb = dry_run(cells, args.profile)
        print(f"{cells:>7} cells: dry run {seconds:6.1f} s, peak memory so far {peak_mb:6.0f} MB")


if __name__ == "__main__":
    main()
