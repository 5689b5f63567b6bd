"""Whether a stage's output is whole, and setting a damaged one aside so that it is rebuilt.

Snakemake rebuilds a missing file only when something it must make needs it: a missing or
damaged file in the middle of a finished sweep (its samples, whose scores and summary are up to
date) would otherwise stay so while the report keeps counting its cell. So the workflow names
every output of the sweep as a target (a missing one is rebuilt, and all that depends on it),
and before it plans, it checks each one that is present (`set_aside_damaged`) and moves a damaged
one aside to `<name>.damaged`: missing now, it is rebuilt by the same command line, and the
cells, claims and report after it.

The checks are cheap, a few bytes read per file, as they run on every run over every output:
- a Parquet file starts and ends with its magic bytes and its footer fits in the file (a file
  cut short, empty, or not Parquet at all, fails);
- an HTML report ends with its closing tag;
- a folder output (a model, a trained head) holds every file of its manifest
  (`write_manifest`, the stage's last write) at its size; one without a manifest (copied
  without it, or made by an earlier version) has whole safetensors and Parquet files.
Damage a cheap check cannot see (bytes changed in the middle of a file) fails the reader: a
table's page checksums (`tables.read_table`), a folder's checksums in its manifest when a job
loads it (`verify_folder`); either sets it aside in the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

from mmspec.storage import durable

PARQUET_MAGIC = b"PAR1"
MANIFEST = "mmspec-files.json"  # a folder output's files, sizes and checksums, written last
DAMAGED_SUFFIX = ".damaged"


def parquet_problem(path: str | os.PathLike, size: int) -> str | None:
    """What makes `path` (of `size` bytes) not a whole Parquet file; None when it looks whole."""
    if size < 12:  # magic, footer length, magic
        return f"truncated to {size} bytes (a Parquet file has at least 12)"
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
    if head != PARQUET_MAGIC:
        return "not a Parquet file (no magic bytes at its start)"
    if tail[4:] != PARQUET_MAGIC:
        return "truncated or damaged (no Parquet footer at its end)"
    (footer,) = struct.unpack("<i", tail[:4])
    if not 0 < footer <= size - 12:
        return f"damaged (its footer claims {footer} bytes of a {size}-byte file)"
    return None


def html_problem(path: str | os.PathLike, size: int) -> str | None:
    with open(path, "rb") as f:
        f.seek(max(0, size - 64))
        tail = f.read()
    return None if b"</html>" in tail else "truncated (no closing </html>)"


def folder_problem(folder: Path) -> str | None:
    """A file of the folder's manifest missing or of another size (without a manifest: a
    safetensors or Parquet file that is not whole); None when all look whole."""
    try:
        listed = _manifest(folder)
    except FileNotFoundError:
        return _files_problem(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"its manifest {MANIFEST} is unreadable ({error})"
    for name, (size, _) in listed.items():
        try:
            found = os.stat(folder / name).st_size
        except FileNotFoundError:
            return f"lacks {name}"
        if found != size:
            return f"holds {name} of {found} bytes, not the {size} its stage wrote"
    return None


def _manifest(folder: Path) -> dict[str, tuple[int, str]]:
    """name -> (size, sha256) of the files the folder's manifest lists."""
    files = json.loads((folder / MANIFEST).read_text())["files"]
    return {name: (entry["size"], entry["sha256"]) for name, entry in files.items()}


def _files_problem(folder: Path) -> str | None:
    for path in sorted(folder.iterdir()):
        if path.suffix == ".safetensors":
            found = safetensors_problem(path, path.stat().st_size)
        elif path.suffix == ".parquet":
            found = parquet_problem(path, path.stat().st_size)
        else:
            continue
        if found is not None:
            return f"holds {path.name}, {found}"
    return None


def safetensors_problem(path: str | os.PathLike, size: int) -> str | None:
    """What makes a safetensors file not whole: its header (a length, then JSON naming each
    tensor's byte range) must fit the file, and the file end where its last tensor does."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"truncated to {size} bytes"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return f"truncated or damaged (its header claims {length} bytes of a {size}-byte file)"
        try:
            header = json.loads(f.read(length))
            end = max(
                (t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"),
                default=0,
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return "damaged (its header is not a safetensors header)"
    if 8 + length + end != size:
        return f"truncated or damaged ({size} bytes, its header says {8 + length + end})"
    return None


def problem(path: str | os.PathLike) -> str | None:
    """What is wrong with the output `path`, or None when it is missing or looks whole (a
    missing one is the workflow's to rebuild as any other missing target)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode):
        return folder_problem(Path(path))
    name = os.fspath(path)
    if name.endswith(".parquet"):
        return parquet_problem(name, info.st_size)
    if name.endswith(".html"):
        return html_problem(name, info.st_size)
    return None


def set_aside(path: str | os.PathLike) -> Path:
    """Move `path` to `<path>.damaged` (`.damaged-2`, ... when that is taken): out of the way
    of its rebuild, its bytes kept for a look."""
    path = Path(path)
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 1
    while os.path.lexists(aside):
        n += 1
        aside = path.with_name(f"{path.name}{DAMAGED_SUFFIX}-{n}")
    os.rename(path, aside)
    return aside


def set_aside_damaged(paths: Iterable[str]) -> list[str]:
    """Check every output in `paths` and set the damaged ones aside; a line per one (also on
    stderr), saying what was wrong and that the run rebuilds it."""
    lines = []
    for path in paths:
        try:
            found = problem(path)
        except OSError as error:  # unreadable: the disk's trouble, not a file to rebuild
            found = None
            print(f"mmspec: could not check {path}: {error}", file=sys.stderr)
        if found is None:
            continue
        aside = set_aside(path)
        lines.append(
            f"mmspec: {path}: {found}; moved aside to {aside.name}: the run rebuilds it, and the "
            "results that depend on it (a dry run lists those jobs)"
        )
        print(lines[-1], file=sys.stderr)
    return lines


def write_manifest(folder: str | os.PathLike) -> None:
    """Record the files of a finished folder output, their sizes and checksums (the stage's
    last write)."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    durable.write_text(folder / MANIFEST, json.dumps({"files": files}, indent=1))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class DamagedOutput(ValueError):
    """A stage's output found damaged as a job read it; it was set aside to be rebuilt."""


_verified: dict[str, list] = {}  # folder -> the stamp (names, sizes, times) it was verified at


def verify_folder(folder: str | os.PathLike) -> None:
    """Check a folder output a job is about to load against the checksums of its manifest
    (bytes changed in place keep its size); DamagedOutput, after setting it aside, when a file
    differs. A folder with no manifest (not a stage's output: a model of the user's own) is
    not checked. Verified once per process while its files' sizes and times stay the same."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        return
    stamp = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())
    key = str(folder.resolve())
    if _verified.get(key) == stamp:
        return
    problem = folder_problem(folder)
    if problem is None:
        for name, (_, sha256) in _manifest(folder).items():
            if _sha256(folder / name) != sha256:
                problem = f"holds {name}, whose bytes are not those its stage wrote"
                break
    if problem is not None:
        aside = set_aside(folder)
        raise DamagedOutput(
            f"{folder}: {problem}; moved aside to {aside.name}: rerun the same snakemake command "
            "line, which rebuilds it and what depends on it"
        )
    _verified[key] = stamp
