"""Stage batch: run a batch of cells' jobs of one per-cell stage (generate, judge or score).

Each cell whose output is missing, damaged or written for another key (`mmspec.batches`: its job,
code and inputs) runs as its own `mmspec <stage> ... 2> <log>` process would (a warm worker
takes it where the stage allows, `mmspec.worker`), and leaves its benchmark file (wall seconds,
peak memory); the others are skipped. A failing cell does not stop the batch: the rest run, and
the job fails at the end naming each failed cell and the tail of its log. The batch's record,
its output, is written only when every cell is done.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from mmspec import batches, durable, integrity

HELP = "run a batch of cells of a per-cell stage, skipping those up to date"
LOG_TAIL = 5  # lines of a failed cell's log the batch's log repeats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", required=True, help="the batch's spec (results/batches/...)")
    parser.add_argument(
        "--out", required=True, help="the batch's record, written when all are done"
    )


def _benchmark(path: str, seconds: float, usage) -> None:
    """A Snakemake-style benchmark file (the columns `mmspec plan` reads)."""
    hms = time.strftime("%H:%M:%S", time.gmtime(seconds))
    cpu = usage.ru_utime + usage.ru_stime
    values = f"{seconds:.4f}\t{hms}\t{usage.ru_maxrss / 1024:.2f}\t{cpu:.2f}"
    text = f"s\th:m:s\tmax_rss\tcpu_time\n{values}\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(path, text)


def run_cell(job: batches.CellJob) -> int:
    """`mmspec <stage> ...` for one cell, its stderr to its log; its exit code."""
    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    Path(job.out).parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(job.log, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mmspec", *job.argv], stdin=subprocess.DEVNULL, stderr=log
        )
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode == 0 and job.benchmark:
        _benchmark(job.benchmark, time.perf_counter() - start, usage)
    return process.returncode


def _tail(path: str) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "    (no log)"
    return "\n".join(f"    {line}" for line in lines[-LOG_TAIL:])


def run(spec: str, out: str) -> int:
    stage, jobs = batches.load_spec(spec)
    failed = []
    ran = 0
    for i, job in enumerate(jobs, 1):
        now = batches.key(job)
        if batches.up_to_date(job, now):
            print(f"[{i}/{len(jobs)}] {job.cell}: up to date", file=sys.stderr, flush=True)
            continue
        damage = integrity.problem(job.out)
        if damage is not None:  # kept for a look, out of the way of its rebuild
            aside = integrity.set_aside(job.out)
            print(f"{job.out}: {damage}; moved aside to {aside.name}", file=sys.stderr)
        batches.key_path(job).unlink(missing_ok=True)  # stale until the new output is written
        start = time.perf_counter()
        code = run_cell(job)
        seconds = time.perf_counter() - start
        if code != 0:
            failed.append(job)
            print(
                f"[{i}/{len(jobs)}] {job.cell}: failed (exit {code}, {seconds:.1f} s); "
                f"log {job.log}:\n{_tail(job.log)}",
                file=sys.stderr,
                flush=True,
            )
            continue
        batches.write_key(job, now)
        ran += 1
        print(f"[{i}/{len(jobs)}] {job.cell}: ran in {seconds:.1f} s", file=sys.stderr, flush=True)
    if failed:
        print(
            f"mmspec batch: error: {len(failed)} of {len(jobs)} {stage} cells failed (each "
            "line above names its log); the others are done and are not run again",
            file=sys.stderr,
        )
        return 1
    batches.write_record(out, jobs)
    print(f"{stage}: {ran} cells run, {len(jobs) - ran} up to date", file=sys.stderr)
    return 0


def main(args: argparse.Namespace) -> int:
    return run(args.spec, args.out)
