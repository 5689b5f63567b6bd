"""The content-addressed judgement cache: one Parquet file shared by every cell and rerun.

A judgement's key is the sha256 of what decides it: judge model, template and its version,
question, reference, answer and the VDC questions. Writers merge under an exclusive flock on
`<path>.lock` and replace the file atomically (temp file + os.replace), so concurrent judge jobs
keep each other's rows and readers never see a half-written file. Failures are stored too (score
NULL, with the error) but are not served: the next run retries them. A success is never replaced
by a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmspec.scoring.judge.templates import TEMPLATE_VERSION
from mmspec.tables import JUDGE_CACHE as SCHEMA
from mmspec.tables import write_table

if TYPE_CHECKING:
    from mmspec.scoring.judge.client import JudgeItem


class JudgeCacheError(RuntimeError):
    """The cache file cannot be read as a judgement cache."""


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


class JudgeCache:
    """The judgement cache at `path` (created on the first put)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.lock_path = self.path + ".lock"

    def _read(self, columns: list[str] | None = None) -> pa.Table | None:
        if not os.path.exists(self.path):
            return None
        try:
            table = pq.read_table(self.path, columns=columns)
            if columns is None:
                table = table.select(SCHEMA.names).cast(SCHEMA)
        except (pa.ArrowException, OSError, KeyError, ValueError) as err:
            # never dropped silently: it may hold many paid judge calls
            raise JudgeCacheError(
                f"judgement cache {self.path} is unreadable or not a judgement cache "
                f"({type(err).__name__}: {err}); move it away to start a new cache"
            ) from err
        return table

    def get(self, keys: Iterable[str]) -> dict[str, tuple[float | None, str | None]]:
        """key -> (score, error) of the keys the cache holds (score None: a stored failure)."""
        table = self._read(["key", "score", "error"])
        wanted = set(keys)
        if table is None or not wanted:
            return {}
        table = table.filter(pc.is_in(table["key"], value_set=pa.array(sorted(wanted))))
        found: dict[str, tuple[float | None, str | None]] = {}
        columns = (table[c].to_pylist() for c in ("key", "score", "error"))
        for key, score, error in zip(*columns, strict=True):
            if key not in found or found[key][0] is None:  # a success wins over a failure
                found[key] = (score, error)
        return found

    def put(self, records: Iterable[dict]) -> None:
        """Merge `records` (key, judge_model, template, template_version, score, error) in."""
        now = datetime.now(UTC)
        incoming: dict[str, dict] = {}
        for record in records:
            row = {name: record.get(name) for name in SCHEMA.names}
            row["created"] = row["created"] or now
            old = incoming.get(row["key"])
            if old is None or row["score"] is not None or old["score"] is None:
                incoming[row["key"]] = row
        if not incoming:
            return
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            table = self._read()
            if table is not None:
                keys, scores = table["key"].to_pylist(), table["score"].to_pylist()
                scored = {k for k, s in zip(keys, scores, strict=True) if s is not None}
                incoming = {
                    k: r for k, r in incoming.items() if r["score"] is not None or k not in scored
                }
                replaced = pa.array(list(incoming), pa.string())
                table = table.filter(pc.invert(pc.is_in(table["key"], value_set=replaced)))
            new = pa.Table.from_pylist(list(incoming.values()), schema=SCHEMA)
            merged = new if table is None else pa.concat_tables([table, new])
            write_table(merged, self.path, SCHEMA)  # atomic: readers never see half a file
