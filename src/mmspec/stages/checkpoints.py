"""Chunk checkpoints of a long stage job: a killed or preempted job resumes from its last chunk.

Finished samples are written in chunks beside the job's output (`<output>.partial/`), each an
atomically written JSON file of the chunk's records and counters. A chunk belongs to one job:
its key hashes the job's parameters and input files, so a changed job never resumes from another
job's chunks (they are discarded). JSON keeps Python floats exactly, so the final table is the
same whether or not the job was interrupted. The folder is removed once the output is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path


def job_key(params: dict, *inputs: str | None) -> str:
    """A hash of a job's parameters and the content of its input files."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for path in inputs:
        if path is None:
            continue
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class Checkpoints:
    """The chunks of one job's output `out`."""

    def __init__(self, out: str | Path, key: str):
        out = Path(out)
        self.folder = out.with_name(out.name + ".partial")
        self.key = key

    def load(self) -> tuple[list[dict], list[dict]]:
        """(records, per-chunk counters) of the finished chunks, in order; chunks of another
        job are discarded (with a message), and so is everything after a gap."""
        chunks = sorted(self.folder.glob("chunk-*.json")) if self.folder.exists() else []
        records, counters = [], []
        for path in chunks:
            chunk = json.loads(path.read_text())
            if chunk.get("key") != self.key or chunk.get("first") != len(records):
                print(
                    f"{self.folder}: {path.name} belongs to another run of this job; starting over",
                    file=sys.stderr,
                )
                self.clear()
                return [], []
            records += chunk["records"]
            counters.append(chunk["counters"])
        if records:
            print(
                f"{self.folder}: resuming after {len(records)} finished samples "
                f"({len(chunks)} chunks)",
                file=sys.stderr,
            )
        return records, counters

    def save(self, first: int, records: list[dict], counters: dict) -> None:
        """Write one chunk (the samples from index `first`) atomically."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"chunk-{first:07d}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        chunk = {"key": self.key, "first": first, "records": records, "counters": counters}
        tmp.write_text(json.dumps(chunk))
        os.replace(tmp, path)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
