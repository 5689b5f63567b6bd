"""What adding and looking up one judge job's judgements costs as the judgement cache grows.

For caches of N existing judgements (`--sizes`), times in one run, on the same rows:

  before   the single shared file of earlier versions (reimplemented here as it was: every put
           merges its rows in under an flock and rewrites the whole file; a lookup reads it)
  after    the cache directory of scoring.judge.cache: a put writes one new shard (temp name,
           fsync, rename); a lookup reads every shard. Measured twice: as judge jobs leave it
           (N / --job-rows shards) and after `compact` (one shard).

Each put adds --job-rows new judgements (a job's worth; a job merges its flushes into one
shard); each lookup asks --job-rows keys, half of them present. Median of --repeats timings.
Ratios are before / after: how many times faster the directory is. Nothing is asserted.

    python benchmarks/bench_judge_cache.py --sizes 1000 10000 100000 1000000
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import secrets
import statistics
import tempfile
import time
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmspec.scoring.judge.cache import JudgeCache, compact, write_shard
from mmspec.storage.tables import JUDGE_CACHE, write_table


def judgements(n: int) -> pa.Table:
    """n successful judgements under fresh sha256-like keys."""
    now = datetime.now(UTC)
    return pa.table(
        {
            "key": [secrets.token_hex(32) for _ in range(n)],
            "judge_model": ["gpt-4o-2024-08-06"] * n,
            "template": ["vdd"] * n,
            "template_version": ["1"] * n,
            "score": [float(i % 6) for i in range(n)],
            "error": pa.nulls(n, pa.string()),
            "created": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        },
        schema=JUDGE_CACHE,
    )


class SingleFileCache:
    """The cache as it was before the directory: one Parquet file, merged into under an flock."""

    def __init__(self, path: str):
        self.path = path

    def get(self, keys: list[str]) -> dict:
        table = pq.read_table(self.path, columns=["key", "score", "error"])
        table = table.filter(pc.is_in(table["key"], value_set=pa.array(keys)))
        return dict(zip(table["key"].to_pylist(), table["score"].to_pylist(), strict=True))

    def put(self, new: pa.Table) -> None:
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            table = pq.read_table(self.path).select(JUDGE_CACHE.names).cast(JUDGE_CACHE)
            scored = pc.is_valid(table["score"])
            keys = table["key"].filter(scored)
            incoming = new.filter(
                pc.or_(pc.is_valid(new["score"]), pc.invert(pc.is_in(new["key"], keys)))
            )
            table = table.filter(pc.invert(pc.is_in(table["key"], incoming["key"])))
            write_table(pa.concat_tables([table, incoming]), self.path, JUDGE_CACHE)


def median_s(action, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def job_keys(existing: pa.Table, job_rows: int) -> list[str]:
    step = max(1, existing.num_rows // (job_rows // 2))  # spread over the whole cache
    present = existing["key"].take(list(range(0, existing.num_rows, step))[: job_rows // 2])
    return present.to_pylist() + judgements(job_rows - len(present))["key"].to_pylist()


def measure(size: int, job_rows: int, repeats: int, scratch: str) -> dict:
    existing = judgements(size)
    keys = job_keys(existing, job_rows)

    single = SingleFileCache(os.path.join(scratch, f"single-{size}.parquet"))
    write_table(existing, single.path, JUDGE_CACHE)
    before_put = median_s(lambda: single.put(judgements(job_rows)), repeats)
    before_get = median_s(lambda: single.get(keys), repeats)

    directory = os.path.join(scratch, f"cache-{size}")
    os.makedirs(directory)
    for start in range(0, size, job_rows):  # as judge jobs leave it: one shard per job
        shard = existing.slice(start, job_rows)
        pq.write_table(shard, os.path.join(directory, f"job-{start:09d}.parquet"))
    shards = len(os.listdir(directory))
    cache = JudgeCache(directory)
    assert len(cache.get(keys)) == job_rows // 2  # the comparison looks up the same rows
    after_get = median_s(lambda: cache.get(keys), repeats)
    after_put = median_s(lambda: write_shard(directory, judgements(job_rows)), repeats)
    compact(directory)
    compacted_get = median_s(lambda: cache.get(keys), repeats)
    compacted_put = median_s(lambda: write_shard(directory, judgements(job_rows)), repeats)
    return {
        "size": size,
        "shards": shards,
        "before_put_s": before_put,
        "after_put_s": after_put,
        "compacted_put_s": compacted_put,
        "before_get_s": before_get,
        "after_get_s": after_get,
        "compacted_get_s": compacted_get,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6])
    parser.add_argument("--job-rows", type=int, default=100, help="judgements one job adds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scratch", default=None, help="where the caches go (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()

    ms = 1000.0
    header = (
        f"{'existing':>9} {'shards':>6} | {'put ms: before':>14} {'after':>7} {'compacted':>9} "
        f"{'ratio':>7} | {'lookup ms: before':>17} {'after':>7} {'compacted':>9} {'ratio':>6}"
    )
    print(f"one job: put {args.job_rows} judgements, look up {args.job_rows} keys")
    print(header)
    rows = []
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        for size in args.sizes:
            r = measure(size, args.job_rows, args.repeats, scratch)
            rows.append(r)
            print(
                f"{size:>9} {r['shards']:>6} | {r['before_put_s'] * ms:>14.1f} "
                f"{r['after_put_s'] * ms:>7.1f} {r['compacted_put_s'] * ms:>9.1f} "
                f"{r['before_put_s'] / r['after_put_s']:>6.0f}x | "
                f"{r['before_get_s'] * ms:>17.1f} {r['after_get_s'] * ms:>7.1f} "
                f"{r['compacted_get_s'] * ms:>9.1f} "
                f"{r['before_get_s'] / r['compacted_get_s']:>5.1f}x",
                flush=True,
            )
    print(
        "put ratio: before / after (sharded); lookup ratio: before / after compaction "
        "(both read the same rows from one file)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"job_rows": args.job_rows, "repeats": args.repeats, "rows": rows}, out)


if __name__ == "__main__":
    main()
