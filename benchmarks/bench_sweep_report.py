"""Aggregate and report of a big sweep: command sizes, time, memory, page size and load time.

Writes the sweep of tests/scale_sweep.py (two toy datasets x SEEDS seeds x AR and SD at gamma
1..99, 200 cells per seed) in a scratch directory, then measures:
- the whole sweep's `snakemake -n -p` (every job planned): its longest shell command, which
  Linux refuses over 128 KiB (MAX_ARG_STRLEN);
- rule aggregate and rule report run by Snakemake on synthetic score tables (wall time), and
  each stage again by hand (`/usr/bin/time`: wall time and peak memory);
- the report: its size, and the time headless Chromium takes to open it (load event plus two
  animation frames, the median of three openings).

    python benchmarks/bench_sweep_report.py --seeds 50    # 10 000 cells
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the sweep the scale test runs

import scale_sweep  # noqa: E402

from mmspec.sweep import config  # noqa: E402

TARGETS = ["results/summary/cells.parquet", "reports/index.html"]
# plotly draws in the scripts the page runs while loading; two frames let it settle
TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


def snakemake(workdir: Path, *args: str) -> tuple[float, str]:
    """Run Snakemake on the repository's Snakefile in `workdir`: (seconds, its output)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--cores", "2"]
    cmd += ["--directory", str(workdir), "--configfile", str(workdir / "sweep.yaml"), *args]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, out.stdout + out.stderr


def longest_command(output: str) -> int:
    """Bytes of the longest shell command a `-p` run printed."""
    lines = [line for line in output.splitlines() if line.startswith("Shell command:")]
    return max(len(line.removeprefix("Shell command: ").encode()) for line in lines)


def timed(cmd: list[str], workdir: Path) -> tuple[float, float]:
    """(seconds, peak MB) of a command, by /usr/bin/time."""
    out = subprocess.run(
        ["/usr/bin/time", "-f", "%e %M", *cmd], cwd=workdir, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seconds, kilobytes = out.stderr.strip().splitlines()[-1].split()
    return float(seconds), float(kilobytes) / 1024


def load_seconds(page: Path, repeats: int = 3) -> float:
    """Median time for headless Chromium to open `page`: load, then two animation frames."""
    from playwright.sync_api import sync_playwright

    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path)
        for _ in range(repeats):
            tab = browser.new_page(viewport={"width": 1400, "height": 900})
            start = time.perf_counter()
            tab.goto(page.as_uri(), wait_until="load", timeout=600_000)
            tab.evaluate(
                "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
            )
            times.append(time.perf_counter() - start)
            tab.close()
        browser.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=50, help="200 cells per seed")
    parser.add_argument("--keep", help="a folder to work in (kept), instead of a scratch one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.keep or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        scale_sweep.write_config(workdir / "sweep.yaml", args.seeds)
        seconds, planned = snakemake(workdir, "--dry-run", "--printshellcmds")
        print(f"cells: {args.seeds * scale_sweep.CELLS_PER_SEED}")
        print(
            f"whole sweep, snakemake -n -p: {seconds:.1f} s, longest shell command "
            f"{longest_command(planned)} bytes"
        )
        start = time.perf_counter()
        scale_sweep.write_scores(workdir, scale_sweep.sweep_config(args.seeds))
        print(f"score tables written: {time.perf_counter() - start:.1f} s")
        only = ["--printshellcmds", "--allowed-rules", "aggregate", "report", "--", *TARGETS]
        seconds, ran = snakemake(workdir, *only)
        print(
            f"snakemake aggregate + report: {seconds:.1f} s, longest shell command "
            f"{longest_command(ran)} bytes"
        )
        mmspec = [sys.executable, "-m", "mmspec.cli"]
        sweep = json.dumps(config.validate(scale_sweep.sweep_config(args.seeds)))
        aggregate = "aggregate --out c.parquet --blocks b.parquet --sweep".split()
        seconds, peak = timed([*mmspec, *aggregate, sweep], workdir)
        print(f"mmspec aggregate by hand: {seconds:.1f} s, peak {peak:.0f} MB")
        report = workdir / "report.html"
        seconds, peak = timed(
            [*mmspec, *"report --cells c.parquet --blocks b.parquet --out report.html".split()],
            workdir,
        )
        print(f"mmspec report by hand: {seconds:.1f} s, peak {peak:.0f} MB")
        print(
            f"report: {report.stat().st_size / 1e6:.1f} MB, opens in Chromium in "
            f"{load_seconds(report):.1f} s"
        )


if __name__ == "__main__":
    main()
