"""Durable, atomic writes: after a crash a file is there whole, or not at all.

A file is written under a hidden temporary name in its own folder, flushed and fsynced, renamed
over its final name, and the folder is fsynced so that the rename itself survives a power cut.
A rename within one folder is atomic on local disks, NFS and Lustre. Without the fsync before it
a crash can leave the new name on a file whose data never reached the disk: a truncated or empty
file under a name that says it is whole. A writer that fails (or is killed) leaves the old file
untouched; a killed one may leave its temporary file, `.<name>.<pid>.<token>.tmp`, which no
reader looks at.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TEMP_SUFFIX = ".tmp"


def temporary_name(path: Path) -> Path:
    """A hidden name beside `path` that no other writer, on any node, picks."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def sync_directory(folder: str | os.PathLike) -> None:
    """Make the renames in `folder` durable where the file system supports it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # NFS clients cannot sync a folder; the server commits the rename itself
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A new binary file to write `path`'s content to; on a clean exit it is fsynced and renamed
    over `path`, and the folder fsynced. On an error it is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = temporary_name(path)
    try:
        with open(temp, "xb") as sink:
            yield sink
            sink.flush()
            os.fsync(sink.fileno())  # on disk before the name says the file is whole
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    sync_directory(path.parent)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path`, durably and atomically."""
    with atomic_file(path) as sink:
        sink.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path`, durably and atomically."""
    write_bytes(path, text.encode())


def sync_tree(folder: str | os.PathLike) -> None:
    """fsync every file and folder under `folder` (and itself): written by a library that does
    not sync (`save_pretrained`), the folder is then durable before it is renamed into place."""
    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        sync_directory(root)


def replace_folder(temp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Move the finished folder `temp` to `path` (replacing what was there), durably: its files
    are fsynced first, the parent folder after. `temp` must be in `path`'s folder."""
    temp, path = Path(temp), Path(path)
    sync_tree(temp)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(temp, path)
    sync_directory(path.parent)
