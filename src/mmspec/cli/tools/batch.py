"""`mmspec batch`: run a batch of cells' jobs of one per-cell stage (generate, judge or score).

Each cell whose output is missing, damaged or written for another key (`mmspec.workflow.batches`:
its job, code and inputs) runs as its own `mmspec <stage> ... 2> <log>` command would (a warm worker
takes it where the stage allows, `mmspec.workflow.worker`; otherwise it runs in this process, so
that a batch starts one interpreter, not one per cell), and leaves its benchmark file (wall
seconds); the others are skipped. A failing cell does not stop the batch: the rest run, and the job
fails at the end naming each failed cell and the tail of its log. The batch's record, its output, is
written only when every cell is done. It runs commands, so it is a tool of the command line rather
than a stage: its rules (generate, judge and score, one job per batch) need no code fingerprint
of their own, each cell's key holds its stage's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mmspec.storage import durable, integrity
from mmspec.sweep import cell_keys

HELP = "run a batch of cells of a per-cell stage, skipping those up to date"
LOG_TAIL = 5  # lines of a failed cell's log the batch's log repeats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec", required=True, help="the batch's spec (results/batches/...)")
    parser.add_argument(
        "--out", required=True, help="the batch's record, written when all are done"
    )


def _benchmark(path: str, seconds: float, cpu: float) -> None:
    """A Snakemake-style benchmark file (`s`: the column `mmspec plan` reads)."""
    hms = time.strftime("%H:%M:%S", time.gmtime(seconds))
    text = f"s\th:m:s\tcpu_time\n{seconds:.4f}\t{hms}\t{cpu:.2f}\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(path, text)


@contextlib.contextmanager
def _stderr_to(log) -> Iterator[None]:
    """This process's stderr (the file descriptor: what a warm worker is handed too) into
    `log` for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_cell(job: cell_keys.CellJob) -> int:
    """`mmspec <stage> ... 2> <log>` for one cell, run as that command line would be (a warm
    worker takes it where the stage allows, else it runs in this process: no interpreter to
    start per cell); its exit code."""
    from mmspec import cli

    Path(job.log).parent.mkdir(parents=True, exist_ok=True)
    Path(job.out).parent.mkdir(parents=True, exist_ok=True)
    start, used = time.perf_counter(), _cpu()
    with open(job.log, "wb") as log, _stderr_to(log):
        try:
            code = cli.main(list(job.argv), as_command=True)
        except SystemExit as stop:  # the parser's exit on bad arguments
            code = stop.code if isinstance(stop.code, int) else 1
    if code == 0 and job.benchmark:
        _benchmark(job.benchmark, time.perf_counter() - start, _cpu() - used)
    return code


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _tail(path: str) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "    (no log)"
    return "\n".join(f"    {line}" for line in lines[-LOG_TAIL:])


def run(spec: str, out: str) -> int:
    from mmspec.workflow import worker

    stage, jobs = cell_keys.load_spec(spec)
    with worker.code_read_once():
        failed, ran = _run_cells(stage, jobs)
    if failed:
        print(
            f"mmspec batch: error: {len(failed)} of {len(jobs)} {stage} cells failed (each "
            "line above names its log); the others are done and are not run again",
            file=sys.stderr,
        )
        return 1
    cell_keys.write_record(out, jobs)
    print(f"{stage}: {ran} cells run, {len(jobs) - ran} up to date", file=sys.stderr)
    return 0


def _run_cells(stage: str, jobs: list) -> tuple[list, int]:
    """Each cell of the batch that is not up to date, run; the failed ones, and how many ran."""
    failed = []
    ran = 0
    for i, job in enumerate(jobs, 1):
        try:
            now = cell_keys.key(job)
        except FileNotFoundError as error:  # an input gone since the job started (set aside
            # as damaged by an earlier cell's read): this cell fails, the others are tried
            failed.append(job)
            print(
                f"[{i}/{len(jobs)}] {job.cell}: failed: its input {error.filename} is missing "
                "(rerun the same snakemake command line, which rebuilds it)",
                file=sys.stderr,
                flush=True,
            )
            continue
        if cell_keys.up_to_date(job, now):
            print(f"[{i}/{len(jobs)}] {job.cell}: up to date", file=sys.stderr, flush=True)
            continue
        damage = integrity.problem(job.out)
        if damage is not None:  # kept for a look, out of the way of its rebuild
            aside = integrity.set_aside(job.out)
            print(f"{job.out}: {damage}; moved aside to {aside.name}", file=sys.stderr)
        cell_keys.key_path(job).unlink(missing_ok=True)  # stale until the new output is written
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
        cell_keys.write_key(job, now)
        ran += 1
        print(f"[{i}/{len(jobs)}] {job.cell}: ran in {seconds:.1f} s", file=sys.stderr, flush=True)
    return failed, ran


def main(args: argparse.Namespace) -> int:
    return run(args.spec, args.out)
