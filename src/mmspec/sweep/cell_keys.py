"""A cell's job and its key: what decided a cell's output, checked and written by the batch job
that runs it (`mmspec batch`; the batches themselves: `mmspec.workflow.batches`).

A cell's key (`results/keys/<stage>/<cell>.json`) is a hash of its job's arguments, its code
fingerprint (plugins included) and its input files' sizes and modification times, bound to its
output's own size and time: a batch job reruns a cell only when that key differs or the output
is missing or damaged. This module imports no more than the batch job needs at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from mmspec.storage import durable, integrity

KEYS = "results/keys"


@dataclass(frozen=True)
class CellJob:
    """One cell's job of a stage: `mmspec <stage> <argv>`, writing `out` (stderr to `log`)."""

    cell: str  # the cell's path (dataset=.../seed=<s>)
    argv: tuple[str, ...]
    out: str
    log: str
    benchmark: str | None
    inputs: tuple[str, ...]  # the files and folders it reads: part of its key
    code: str  # the code fingerprint of what it runs, plugins included

    def static_key(self) -> str:
        """A hash of the job but its inputs' states (the run adds them: `key`)."""
        text = json.dumps([self.argv, self.inputs, self.code], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def size_and_time(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns]


def at(path: str, results: str | Path = "results") -> Path:
    """A workflow path ("results/...") under the results folder `results`."""
    head, _, rest = path.partition("/")
    return Path(results) / rest if head == "results" and rest else Path(path)


def _inputstamp(path: Path) -> list[int]:
    """A file's size and time; a folder output's manifest's (it is written last)."""
    info = os.stat(path)
    if os.path.isdir(path):
        manifest = path / integrity.MANIFEST
        info = os.stat(manifest) if manifest.exists() else info
    return size_and_time(info)


def key(job: CellJob, results: str | Path = "results") -> str:
    """What decides the cell's output now: its job, code and its inputs' states
    (FileNotFoundError for a missing input)."""
    stamps = [_inputstamp(at(p, results)) for p in job.inputs]
    text = json.dumps([job.static_key(), stamps], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def key_path(job: CellJob, results: str | Path = "results") -> Path:
    """Where the cell's key is kept: `results/keys/<stage>/<cell>.json`, a tree of its own (as
    logs and benchmarks are), so that a cell's folder holds its output alone."""
    return at(f"{KEYS}/{job.argv[0]}/{job.cell}.json", results)


def up_to_date(job: CellJob, now: str, results: str | Path = "results") -> bool:
    """The cell's output is there, whole, and was written for the key `now`."""
    out = at(job.out, results)
    try:
        recorded = json.loads(key_path(job, results).read_text())
        info = os.stat(out)
    except (FileNotFoundError, ValueError):
        return False
    if recorded.get("key") != now or recorded.get("output") != size_and_time(info):
        return False
    return integrity.problem(out) is None


def is_done(job: CellJob, results: str | Path = "results") -> bool:
    """The cell's output is up to date with its job, code and inputs as they are now."""
    try:
        return up_to_date(job, key(job, results), results)
    except FileNotFoundError:  # an input to be made first
        return False


def write_key(job: CellJob, now: str) -> None:
    """Record that the output now at `job.out` was written for key `now`."""
    stamp = size_and_time(os.stat(job.out))
    path = key_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(path, json.dumps({"key": now, "output": stamp}))


def write_record(batch_record: str, jobs: list[CellJob]) -> None:
    outputs = {job.out: size_and_time(os.stat(job.out)) for job in jobs}
    durable.write_text(batch_record, json.dumps({"outputs": outputs}, indent=0))


def load_spec(path: str) -> tuple[str, list[CellJob]]:
    data = json.loads(Path(path).read_text())
    jobs = [
        CellJob(**{**j, "argv": tuple(j["argv"]), "inputs": tuple(j["inputs"])})
        for j in data["cells"]
    ]
    return data["stage"], jobs


def command_line(job: CellJob) -> str:
    """The job as the command a user would type (the batch's log names it)."""
    return "mmspec " + " ".join(shlex.quote(a) for a in job.argv) + f" 2> {job.log}"
