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
  (`write_manifest`, the stage's last write) at its size.
Damage a cheap check cannot see (bytes changed in the middle of a file) fails the reader
(`tables.read_table`), which sets the file aside in the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

from mmspec import durable

PARQUET_MAGIC = b"PAR1"
MANIFEST = ".mmspec-files.json"  # a folder output's files and sizes, written last
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
    """A file of the folder's manifest missing or of another size; None when all are there (or
    the folder has no manifest: made by a version before manifests, taken as whole)."""
    manifest = folder / MANIFEST
    try:
        listed = json.loads(manifest.read_text())["files"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"its manifest {MANIFEST} is unreadable ({error})"
    for name, size in listed.items():
        try:
            found = os.stat(folder / name).st_size
        except FileNotFoundError:
            return f"lacks {name}"
        if found != size:
            return f"holds {name} of {found} bytes, not the {size} its stage wrote"
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
    """Move `path` to `<path>.damaged` (replacing an earlier one): out of the way of its
    rebuild, its bytes kept for a look."""
    path = Path(path)
    aside = path.with_name(path.name + DAMAGED_SUFFIX)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
    os.replace(path, aside)
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
            f"mmspec: {path}: {found}; moved aside to {aside.name}: this run rebuilds it, "
            "and the results that depend on it"
        )
        print(lines[-1], file=sys.stderr)
    return lines


def write_manifest(folder: str | os.PathLike) -> None:
    """Record the files of a finished folder output and their sizes (the stage's last write)."""
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    durable.write_text(folder / MANIFEST, json.dumps({"files": files}, indent=1))
