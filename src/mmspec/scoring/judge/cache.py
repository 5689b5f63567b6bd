"""The content-addressed judgement cache: a directory of immutable Parquet shards.

A judgement's key is the sha256 of what decides it: judge model, template and its version, question,
reference, answer and the VDC questions. The cache is a directory (results/judge/cache/) whose files
are never rewritten: each put writes the rows it adds as a new shard under a name no other writer
can pick (time, host, pid, random token), durably (`mmspec.storage.durable`: a hidden temp name in
the same directory, fsynced, then renamed). A rename within one directory is atomic on local disks,
NFS and Lustre, so a reader sees a shard whole or not at all, and judge jobs on any node need no
lock (flock is unreliable on those file systems). A write costs what it adds; a lookup reads the key
column of every shard (pyarrow file by file for a few shards, DuckDB for many: it reads ten thousand
small files in about a second). A killed writer's temp file is never read. A damaged shard (a disk
that lost data, a file cut short by a copy, a file that is not a judgement cache) is named on stderr
and set aside as `<shard>.damaged`, kept but never read again; the answers it held are judged again.
A read that fails for the file system's sake (an I/O error, a permission) is an error instead: the
shard may be whole. An NFS client may list a shard written on another node only once its attribute
cache expires (seconds): meanwhile an answer may be judged twice, never lost.

Failures are stored too (score NULL, with the error) but are not served: the next run retries
them. Of one key's rows a success wins over any failure, so a later failure never hides it, and
the latest success over earlier ones.

Housekeeping: a JudgeCache merges the shards it wrote into one when its job is done
(`merge_own_shards`), and `compact` merges a whole cache into one shard while jobs run. The
single-file cache of earlier mmspec versions, `<cache>.parquet` beside the directory, is read as
one more shard until `compact` moves its rows into the directory.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import socket
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmspec.scoring.judge.templates import TEMPLATE_VERSION
from mmspec.storage import durable
from mmspec.storage.tables import JUDGE_CACHE as SCHEMA

if TYPE_CHECKING:
    from mmspec.scoring.judge.client import JudgeItem

SHARD_SUFFIX = ".parquet"
TEMP_SUFFIX = durable.TEMP_SUFFIX
DAMAGED_SUFFIX = ".damaged"  # a damaged shard, set aside: never listed, never removed
LEGACY_SUFFIX = ".parquet"  # <cache>.parquet: the single-file cache of earlier versions
READ_THREADS = 8  # shards read at once: a lookup over many small shards waits on file opens
# measured: below this many shards pyarrow file by file beats DuckDB's fixed cost, above it
# DuckDB wins (10^4 shards of 100 rows: about 4x)
DUCKDB_FROM_SHARDS = 32
GLOB_CHARACTERS = "*?[{"  # DuckDB reads a path holding one as a pattern: such paths skip it
RESCANS = 20  # a lookup lists the shards again when a compaction removed one it was reading
STALE_TEMP_S = 24 * 3600.0  # a temp file this old belongs to a killed writer: compact removes it


class JudgeCacheError(RuntimeError):
    """A file of the cache cannot be read as judgements."""


class _ShardVanished(Exception):
    """A listed shard was removed (by a compaction, after merging it) before it was read."""


class _ShardDamaged(Exception):
    """A listed shard could not be read as judgements; it has been set aside."""


def cache_key(judge_model: str, item: JudgeItem) -> str:
    """sha256 of everything that decides the item's judgement."""
    fields = [
        judge_model,
        item.template,
        TEMPLATE_VERSION[item.template],
        item.question,
        item.reference,
        item.answer,
        [list(pair) for pair in item.qa],
    ]
    # JSON, not joined strings: no two different field lists serialise the same
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()


def _shard_name() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    # time first, so a listing runs oldest first; host, pid and token: no two writers, on any
    # node, ever pick the same name
    return f"{stamp}-{host}-{os.getpid()}-{secrets.token_hex(8)}{SHARD_SUFFIX}"


def _write_parquet(table: pa.Table, sink) -> None:
    pq.write_table(table, sink)


def write_shard(directory: str | os.PathLike, table: pa.Table) -> str:
    """Write `table` as a new shard of the cache at `directory`, atomically; returns its path."""
    final = os.path.join(os.fspath(directory), _shard_name())
    with durable.atomic_file(final) as sink:  # its temp name is hidden: readers never list it
        _write_parquet(table.select(SCHEMA.names).cast(SCHEMA), sink)
    return final


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # another compaction removed it first
        os.unlink(path)


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _read_shard(path: str, columns: list[str], keys: pa.Array | None) -> pa.Table:
    """The shard's `columns`, only the rows of `keys` if given; raises _ShardVanished,
    _ShardDamaged (having set the file aside) or a JudgeCacheError naming the file."""
    try:
        with pq.ParquetFile(path) as shard:
            missing = [name for name in SCHEMA.names if name not in shard.schema_arrow.names]
            if missing:
                raise KeyError(f"no columns {missing}")
            table = shard.read(columns=columns)
        table = table.cast(pa.schema([SCHEMA.field(name) for name in columns]))
    except FileNotFoundError:
        raise _ShardVanished(path) from None
    except (pa.ArrowException, OSError, KeyError, ValueError) as err:
        if not os.path.exists(path):  # removed while open (NFS: a stale file handle)
            raise _ShardVanished(path) from None
        if isinstance(err, OSError) and err.errno is not None:
            # the file system failed, not the file: it may be whole and hold many paid calls
            raise JudgeCacheError(
                f"judgement cache file {path} cannot be read ({type(err).__name__}: {err}); "
                "fix what stops reading it, or move it out of the cache to go on without it "
                "(its answers are then judged again)"
            ) from err
        _set_aside(path, f"{type(err).__name__}: {' '.join(str(err).split())}")
        raise _ShardDamaged(path) from None
    if keys is not None:
        table = table.filter(pc.is_in(table["key"], value_set=keys))
    return table


def _read_whole_shard(path: str, columns: list[str], keys: pa.Array | None) -> pa.Table | None:
    """_read_shard, or None for a damaged shard (set aside: its answers are judged again)."""
    try:
        return _read_shard(path, columns, keys)
    except _ShardDamaged:
        return None


def _set_aside(path: str, why: str) -> None:
    """Rename the damaged shard `path` out of the cache, saying so; _ShardVanished if another
    reader set it aside first."""
    aside = path + DAMAGED_SUFFIX
    if os.path.exists(aside):  # an earlier damaged file of the same name (the single file)
        aside = f"{path}.{secrets.token_hex(4)}{DAMAGED_SUFFIX}"
    try:
        os.replace(path, aside)
        kept = f"set aside as {aside} (never read again; restore it from a copy if one is whole)"
    except FileNotFoundError:
        raise _ShardVanished(path) from None
    except OSError as err:
        kept = f"skipped (it cannot be set aside: {err})"
    # never silent: it may have held many paid judge calls
    print(
        f"judgement cache file {path} is damaged or not a judgement cache ({why}); {kept}; "
        "the answers it held are judged again",
        file=sys.stderr,
    )


def _query_shards(paths: list[str], columns: list[str], keys: list[str]) -> pa.Table | None:
    """`columns` of the rows of `keys` in all `paths` at once (DuckDB: many times faster than
    file by file over many small shards); None if a file failed, to be found file by file."""
    if any(c in path for path in paths for c in GLOB_CHARACTERS):
        return None
    query = f"SELECT {', '.join(columns)} FROM read_parquet(?) WHERE key IN (SELECT unnest(?))"
    try:
        with duckdb.connect(config={"threads": READ_THREADS}) as con:
            table = con.sql(query, params=[paths, keys]).to_arrow_table()
    except duckdb.Error:
        return None
    return table.cast(pa.schema([SCHEMA.field(name) for name in columns]))


def _winners(table: pa.Table) -> pa.Table:
    """One row per key, sorted by key: a success over any failure, then the latest."""
    if table.num_rows == 0:
        return table
    ranked = table.append_column("_scored", pc.is_valid(table["score"])).sort_by(
        [
            ("key", "ascending", "at_start"),
            ("_scored", "ascending", "at_start"),
            ("created", "ascending", "at_start"),  # a row without a time ranks below any with
        ]
    )
    keys = ranked["key"]
    # the last row of each key's run ranks highest
    last = pc.not_equal(keys.slice(0, len(keys) - 1), keys.slice(1)).combine_chunks()
    last = pa.concat_arrays([last, pa.array([True])])
    return ranked.filter(last).drop_columns(["_scored"])


class JudgeCache:
    """The judgement cache in the directory `path` (created by the first put). The single-file
    cache of earlier versions, `<path>.parquet`, is read as part of it."""

    def __init__(self, path: str | os.PathLike):
        self.directory = os.fspath(path).rstrip("/") or "/"
        if self.directory.endswith(SHARD_SUFFIX):
            raise ValueError(
                f"judgement cache {self.directory}: the cache is a directory, e.g. "
                "results/judge/cache (a single-file cache of earlier versions, "
                "results/judge/cache.parquet, is read from beside it)"
            )
        self.legacy_path = self.directory + LEGACY_SUFFIX
        self._written: list[tuple[str, pa.Table]] = []  # shards this object put, and their rows

    def shards(self) -> list[str]:
        """The files the cache reads: the earlier versions' single file first, then the
        directory's shards, oldest first (temp files of writers never)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            names = []
        paths = [
            os.path.join(self.directory, name)
            for name in names
            if name.endswith(SHARD_SUFFIX) and not name.startswith(".")
        ]
        if os.path.isfile(self.legacy_path):
            paths.insert(0, self.legacy_path)
        return paths

    def _scan(self, columns: list[str], keys: Iterable[str] | None = None) -> pa.Table:
        keys = None if keys is None else sorted(keys)
        value_set = None if keys is None else pa.array(keys, pa.string())
        for _ in range(RESCANS):
            paths = self.shards()
            if keys is not None and len(paths) >= DUCKDB_FROM_SHARDS:
                found = _query_shards(paths, columns, keys)
                if found is not None:
                    return found
            # file by file: slower, but it names a bad file, or sees that one vanished
            try:
                if len(paths) < 2:
                    parts = [_read_whole_shard(path, columns, value_set) for path in paths]
                else:
                    with ThreadPoolExecutor(min(READ_THREADS, len(paths))) as pool:
                        read = functools.partial(_read_whole_shard, columns=columns, keys=value_set)
                        parts = list(pool.map(read, paths))
                parts = [part for part in parts if part is not None]
            except _ShardVanished:
                continue  # merged into a newer shard by a compaction: that one is listed now
            if not parts:
                return pa.schema([SCHEMA.field(name) for name in columns]).empty_table()
            return pa.concat_tables(parts)
        raise JudgeCacheError(
            f"judgement cache {self.directory}: its shards kept disappearing while read "
            f"({RESCANS} listings); is a compaction running in a loop?"
        )

    def rows(self) -> pa.Table:
        """Every stored row (a key may have several: failures, or copies after a compaction)."""
        return self._scan(SCHEMA.names)

    def get(self, keys: Iterable[str]) -> dict[str, tuple[float | None, str | None]]:
        """key -> (score, error) of the keys the cache holds (score None: a stored failure)."""
        wanted = set(keys)
        if not wanted:
            return {}
        found = _winners(self._scan(["key", "score", "error", "created"], wanted))
        columns = (found[name].to_pylist() for name in ("key", "score", "error"))
        return {key: (score, error) for key, score, error in zip(*columns, strict=True)}

    def put(self, records: Iterable[dict]) -> str | None:
        """Write `records` (key, judge_model, template, template_version, score, error) as one
        new shard; returns its path (None if there were no records)."""
        now = datetime.now(UTC)
        incoming: dict[str, dict] = {}
        for record in records:
            row = {name: record.get(name) for name in SCHEMA.names}
            row["created"] = row["created"] or now
            old = incoming.get(row["key"])
            if old is None or row["score"] is not None or old["score"] is None:
                incoming[row["key"]] = row
        if not incoming:
            return None
        table = pa.Table.from_pylist(list(incoming.values()), schema=SCHEMA)
        path = write_shard(self.directory, table)
        self._written.append((path, table))
        return path

    def merge_own_shards(self) -> None:
        """Replace the shards this object put by one, so a job that flushed often leaves one
        shard (the rows are still in memory: the cost is what the job added)."""
        if len(self._written) < 2:
            return
        table = _winners(pa.concat_tables(table for _, table in self._written))
        merged = write_shard(self.directory, table)  # before the removals: no row is ever absent
        for path, _ in self._written:
            _remove(path)
        self._written = [(merged, table)]


@dataclass(frozen=True)
class Compaction:
    """What `compact` did."""

    merged_files: int  # shards (and the earlier versions' single file) merged and removed
    rows_read: int
    rows_kept: int  # one per key
    temp_files_removed: int  # temp files of writers killed at least `stale_temp_s` ago
    path: str | None  # the merged shard; None if there was nothing to merge


def _remove_stale_temp_files(directory: str, stale_temp_s: float) -> int:
    removed = 0
    cutoff = time.time() - stale_temp_s
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
                continue
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime <= cutoff:
                    os.unlink(entry.path)
                    removed += 1
    return removed


def compact(path: str | os.PathLike, stale_temp_s: float = STALE_TEMP_S) -> Compaction:
    """Merge the cache at `path` into one shard holding each key's winning row.

    Safe beside running judge jobs and other compactions, with no lock: the merged shard is
    written (atomically) before the files it replaces are removed, so every row stays readable
    throughout (for a moment twice, which lookups resolve); a file another compaction removed
    meanwhile is skipped, its rows being in that compaction's shard; shards written after the
    listing wait for the next compaction. The earlier versions' single file is merged and removed
    too, unless it changed while being read.
    """
    cache = JudgeCache(path)
    read: list[tuple[str, tuple | None, pa.Table]] = []
    for shard in cache.shards():
        identity = _identity(shard)
        try:
            read.append((shard, identity, _read_shard(shard, SCHEMA.names, None)))
        except (_ShardVanished, _ShardDamaged):
            continue
    temp_files_removed = _remove_stale_temp_files(cache.directory, stale_temp_s)
    if len(read) < 2 and cache.legacy_path not in (shard for shard, _, _ in read):
        return Compaction(0, 0, 0, temp_files_removed, None)
    rows = pa.concat_tables(table for _, _, table in read)
    kept = _winners(rows)
    merged = write_shard(cache.directory, kept)
    removed = 0
    for shard, identity, _ in read:
        if shard == cache.legacy_path and _identity(shard) != identity:
            continue  # rewritten by an earlier mmspec meanwhile: its new rows are not merged
        _remove(shard)
        removed += 1
    return Compaction(removed, rows.num_rows, kept.num_rows, temp_files_removed, merged)
