"""Chunk checkpoints of a long stage job: a killed or preempted job resumes from its last chunk.

Finished samples are written in chunks beside the job's output (`<output>.partial/`), each a JSON
file of the chunk's records and counters, written durably (`mmspec.storage.durable`: a crash leaves
a chunk whole or absent) and named by the samples it holds, `chunk-<first>-<end>.json`. A chunk
belongs to one job: its key hashes the job's parameters and input files, so a changed job never
resumes from another job's chunks (they are discarded). Each carries a checksum of its records and
counters, so a chunk whose bytes changed and still parse (a digit flipped) is told from a whole one.
A damaged chunk (a disk that lost data, a file cut short by a copy) is named on stderr and dropped
with the chunks after it (the records are indexed by position, so the chunks kept stay contiguous);
its samples are decoded again. JSON keeps Python floats exactly, so the final table is the same
whether or not the job was interrupted. The folder is removed once the output is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from mmspec.storage import durable


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


class OutputBusy(ValueError):
    """Another process is writing the same output."""


WRITER = ".writer"  # the writer lock, in the output's partial folder


def partial_folder(out: str | Path) -> Path:
    """`<out>.partial/`: a job's partial work on `out` (checkpoints, its writer lock)."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


@contextlib.contextmanager
def one_writer(out: str | Path) -> Iterator[None]:
    """Hold `out`'s writer lock (`<out>.partial/.writer`) while a job writes it and its
    checkpoints. A job a killed Snakemake left running keeps writing; the rerun's job for the
    same output then stops at once, naming it, rather than both writing the same files (and
    timing each other's decodes). The job removes the folder, lock included, once its output is
    written; a process that opened the lock before that locks a removed file, sees so, and takes
    the lock again."""
    folder = partial_folder(out)
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / WRITER, "a+")  # noqa: SIM115 (held across the job)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            raise OutputBusy(
                f"{out}: {holder} is writing it (a job left running by a Snakemake that was "
                "killed?); stop that process, or let it finish, then rerun the same command line"
            ) from None
        try:
            current = os.stat(folder / WRITER).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(lock.fileno()).st_ino:
            break
        lock.close()  # locked a lock file its job had removed as it finished: take the new one
    with lock:
        lock.seek(0)
        lock.truncate()
        lock.write(f"process {os.getpid()} on {socket.gethostname()}")
        lock.flush()
        yield  # released as the file closes (or the process ends)


def clear_partial(folder: Path) -> None:
    """Remove a job's partial work from `folder`, but its writer lock (held by the job)."""
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.name == WRITER:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


# chunk-<first>-<end>.json holds samples [first, end); earlier versions wrote chunk-<first>.json
CHUNK_NAME = re.compile(r"chunk-(\d+)(?:-(\d+))?\.json")
CHUNK_FIELDS = ("key", "first", "records", "counters")


class DamagedChunk(ValueError):
    """A chunk file that cannot be read as a chunk: what is wrong with it."""


class Checkpoints:
    """The chunks of one job's output `out`."""

    def __init__(self, out: str | Path, key: str):
        self.folder = partial_folder(out)
        self.key = key

    def _chunks(self) -> list[tuple[int, int | None, Path]]:
        """(first, end or None, path) of the chunk files, by first sample."""
        found = []
        for path in self.folder.glob("chunk-*.json") if self.folder.exists() else ():
            name = CHUNK_NAME.fullmatch(path.name)
            if name:
                end = int(name[2]) if name[2] else None
                found.append((int(name[1]), end, path))
        return sorted(found, key=lambda chunk: (chunk[0], chunk[2].name))

    def load(self) -> tuple[list[dict], list[dict]]:
        """(records, per-chunk counters) of the finished chunks, in order. Chunks of another
        job are discarded (with a message); a damaged chunk, or one after a gap, is dropped
        with every chunk after it (named on stderr), and the job resumes before it."""
        chunks = self._chunks()
        records, counters = [], []
        for index, (first, end, path) in enumerate(chunks):
            try:
                chunk = _read_chunk(path, first, end)
            except DamagedChunk as damage:
                self._drop(chunks[index:], len(records), str(damage))
                break
            if chunk["key"] != self.key:
                print(
                    f"{self.folder}: {path.name} belongs to another run of this job; starting over",
                    file=sys.stderr,
                )
                clear_partial(self.folder)
                return [], []
            if first != len(records):
                missing = f"samples {len(records)} to {first - 1} are in no chunk"
                self._drop(chunks[index:], len(records), missing)
                break
            records += chunk["records"]
            counters.append(chunk["counters"])
        if records:
            print(
                f"{self.folder}: resuming after {len(records)} finished samples "
                f"({len(counters)} chunk{'s' if len(counters) > 1 else ''})",
                file=sys.stderr,
            )
        return records, counters

    def _drop(self, chunks: list[tuple[int, int | None, Path]], kept: int, why: str) -> None:
        """Remove `chunks` (the first is the bad one) and say which samples are decoded again."""
        first, end, path = chunks[0]
        held = f"the {end - first} samples it held" if end is not None else "the samples it held"
        later = {1: "", 2: ", and the chunk after it"}.get(
            len(chunks), f", and the {len(chunks) - 1} chunks after it"
        )
        print(
            f"{path}: {why}; dropped with {held} (from sample {first}){later}; they are decoded "
            f"again (the job resumes at sample {kept})",
            file=sys.stderr,
        )
        for _, _, stale in chunks:
            stale.unlink(missing_ok=True)

    def save(self, first: int, records: list[dict], counters: dict) -> None:
        """Write one chunk (the samples from index `first`), durably and atomically."""
        path = self.folder / f"chunk-{first:07d}-{first + len(records):07d}.json"
        chunk = {"key": self.key, "first": first, "records": records, "counters": counters}
        chunk["digest"] = _digest(records, counters)
        durable.write_text(path, json.dumps(chunk))

    def clear(self) -> None:
        """Remove the folder once the output is written (its writer lock too)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _read_chunk(path: Path, first: int, end: int | None) -> dict:
    """The chunk in `path`, named for samples [first, end); DamagedChunk saying what is wrong
    (only its own key is not checked here: another job's chunk is whole, and discarded)."""
    try:
        chunk = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DamagedChunk(f"unreadable ({type(err).__name__}: {err})") from None
    if not isinstance(chunk, dict):
        raise DamagedChunk(f"not a chunk (a JSON {type(chunk).__name__}, not an object)")
    missing = [name for name in CHUNK_FIELDS if name not in chunk]
    if missing:
        raise DamagedChunk(f"not a whole chunk (no {', '.join(missing)})")
    records = chunk["records"]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DamagedChunk("its records are not a list of objects")
    if not isinstance(chunk["counters"], dict):
        raise DamagedChunk("its counters are not an object")
    if chunk["first"] != first:
        raise DamagedChunk(f"it says it starts at sample {chunk['first']!r}, its name {first}")
    if end is not None and len(records) != end - first:
        raise DamagedChunk(f"it holds {len(records)} records, its name says {end - first}")
    # (chunks of earlier versions carry no checksum)
    if "digest" in chunk and chunk["digest"] != _digest(records, chunk["counters"]):
        raise DamagedChunk("its records or counters do not match its checksum")
    return chunk


def _digest(records: list[dict], counters: dict) -> str:
    """A checksum of a chunk's content (JSON keeps it exactly, so it reads back the same)."""
    return hashlib.sha256(json.dumps([records, counters], sort_keys=True).encode()).hexdigest()
