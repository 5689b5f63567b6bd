"""The judgement cache under real concurrency: separate processes (as judge jobs on a cluster
are) write 10^5 judgements into one cache directory while another reads and another compacts;
a killed writer's temp file, a damaged shard, the order of successes and failures, reruns, the
earlier single-file cache. No test here times anything."""

from __future__ import annotations

import errno
import io
import multiprocessing
import os
import random
import re
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmspec.scoring import judge as judge_package
from mmspec.scoring.judge import (
    EmbeddedJudge,
    JudgeCache,
    JudgeCacheError,
    JudgeClient,
    JudgeEndpoint,
    JudgeItem,
    cache_key,
    compact,
    judge_items,
)
from mmspec.scoring.judge import cache as cache_module
from mmspec.storage.tables import JUDGE_CACHE

# spawn, not fork: each writer starts as a fresh interpreter, as a judge job does
SPAWN = multiprocessing.get_context("spawn")
WRITERS, PUTS, PER_PUT = 4, 18, 1250  # 90 000 judgements from the writers...
BASE_SHARDS, PER_BASE_SHARD = 10, 1000  # ... and 10 000 written before they start: 10^5
JOIN_S = 300  # a stuck child fails the test instead of hanging it


def row(key: str, score: float | None, error: str | None = None) -> dict:
    fields = {"judge_model": "m", "template": "vdd", "template_version": "1"}
    return {"key": key, **fields, "score": score, "error": error}


def writer_key(writer: int, i: int) -> str:
    return f"w{writer}-{i:06d}"


def writer_score(writer: int, i: int) -> float:
    return float((writer * 7 + i) % 6)


def write_judgements(directory: str, writer: int, start, sleep_s: float) -> None:
    """One judge job: PUTS shards of its own successes, each also holding failures of keys that
    the next writer judges successfully (so failures land before and after those successes),
    then its shards merged into one."""
    cache = JudgeCache(directory)
    start.wait()
    for p in range(PUTS):
        rows = []
        for i in range(p * PER_PUT, (p + 1) * PER_PUT):
            rows.append(row(writer_key(writer, i), writer_score(writer, i)))
            if i % 10 == 0:
                rows.append(row(writer_key((writer + 1) % WRITERS, i), None, "HTTP 500"))
        cache.put(rows)
        time.sleep(sleep_s)  # let the reader and the compactor run between puts
    cache.merge_own_shards()


def read_base_keys(directory: str, expected: dict, start, stop, report) -> None:
    """Look the keys written before the writers started up, over and over: every lookup must
    serve each of them, whatever the writers and the compactor are doing meanwhile."""
    start.wait()
    lookups, problems = 0, []
    while not stop.is_set() or lookups == 0:
        found = JudgeCache(directory).get(expected)
        lookups += 1
        wrong = [k for k, score in expected.items() if found.get(k) != (score, None)]
        if wrong:
            problems.append(f"lookup {lookups}: {len(wrong)} keys wrong, e.g. {wrong[0]}")
    report.put(("reader", lookups, problems))


def compact_repeatedly(directory: str, start, stop, report) -> None:
    start.wait()
    merges = 0
    while True:
        merges += compact(directory).merged_files >= 2
        if stop.is_set():
            break
    report.put(("compactor", merges, []))


def write_half_then_hang(table: pa.Table, sink) -> None:
    """A writer killed mid-write: half a Parquet file in its temp file, then nothing."""
    data = io.BytesIO()
    pq.write_table(table, data)
    sink.write(data.getvalue()[: len(data.getvalue()) // 2])
    sink.flush()
    time.sleep(3600)


def write_and_get_killed(directory: str) -> None:
    cache_module._write_parquet = write_half_then_hang
    JudgeCache(directory).put([row("killed", 5.0)])


def judge_in_a_job(directory: str, base_url: str, answers: list[str], start) -> None:
    start.wait()
    client = JudgeClient(JudgeEndpoint(base_url, "toy-judge", backoff_s=0.01))
    judged = judge_items([vdd(a) for a in answers], client, JudgeCache(directory))
    assert all(j.score is not None for j in judged)


REFERENCE = "the red circle moves from the top left to the bottom right ."


def vdd(answer: str) -> JudgeItem:
    return JudgeItem("vdd", "describe the video .", REFERENCE, answer)


@pytest.fixture(params=["pyarrow", "duckdb"])
def read_path(request, monkeypatch):
    """Lookups read shards file by file (pyarrow, few shards) or all at once (DuckDB, many)."""
    monkeypatch.setattr(
        cache_module, "DUCKDB_FROM_SHARDS", 10**9 if request.param == "pyarrow" else 1
    )
    return request.param


def join_all(processes) -> None:
    for process in processes:
        process.join(JOIN_S)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def test_concurrent_processes_write_100k_judgements_and_lose_none(tmp_path):
    directory = str(tmp_path / "cache")
    base = {f"base-{i:06d}": float(i % 6) for i in range(BASE_SHARDS * PER_BASE_SHARD)}
    items = list(base.items())
    for s in range(BASE_SHARDS):
        JudgeCache(directory).put(row(k, v) for k, v in items[s::BASE_SHARDS])
    start, stop, report = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    writers = [
        SPAWN.Process(target=write_judgements, args=(directory, w, start, 0.02))
        for w in range(WRITERS)
    ]
    others = [
        SPAWN.Process(target=read_base_keys, args=(directory, base, start, stop, report)),
        SPAWN.Process(target=compact_repeatedly, args=(directory, start, stop, report)),
    ]
    for process in writers + others:
        process.start()
    start.set()
    join_all(writers)
    stop.set()
    reports = {}
    for _ in others:
        name, count, problems = report.get(timeout=JOIN_S)
        reports[name] = count, problems
    join_all(others)

    lookups, problems = reports["reader"]
    assert lookups >= 1 and problems == []
    assert reports["compactor"][0] >= 1  # it merged while the writers wrote
    expected = dict(base)
    for w in range(WRITERS):
        for i in range(PUTS * PER_PUT):
            expected[writer_key(w, i)] = writer_score(w, i)
    assert len(expected) == 10**5
    found = JudgeCache(directory).get(expected)
    lost = [k for k in expected if k not in found]
    wrong = [k for k, score in expected.items() if k in found and found[k] != (score, None)]
    assert (len(lost), len(wrong)) == (0, 0), (lost[:3], wrong[:3])
    # one final compaction leaves exactly one row per judgement: none duplicated
    compact(directory)
    rows = JudgeCache(directory).rows()
    assert rows.num_rows == 10**5
    assert dict(zip(rows["key"].to_pylist(), rows["score"].to_pylist(), strict=True)) == expected
    assert not [name for name in os.listdir(directory) if name.endswith(".tmp")]


def test_a_killed_writers_temp_file_is_ignored_then_cleared(tmp_path):
    directory = str(tmp_path / "cache")
    JudgeCache(directory).put([row("kept", 4.0)])
    killed = SPAWN.Process(target=write_and_get_killed, args=(directory,))
    killed.start()
    deadline = time.monotonic() + JOIN_S
    while not [n for n in os.listdir(directory) if n.endswith(".tmp")]:
        assert killed.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the half file is flushed: the writer hangs in its sleep now
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(JOIN_S)
    (temp,) = [Path(directory, n) for n in os.listdir(directory) if n.endswith(".tmp")]
    assert temp.stat().st_size > 0
    with pytest.raises(pa.ArrowInvalid):  # half a Parquet file
        pq.read_table(temp)

    cache = JudgeCache(directory)
    assert str(temp) not in cache.shards()
    assert cache.get(["kept", "killed"]) == {"kept": (4.0, None)}
    assert compact(directory, stale_temp_s=3600).temp_files_removed == 0  # may be a live writer
    assert temp.exists()
    assert compact(directory, stale_temp_s=0).temp_files_removed == 1
    assert not temp.exists() and cache.get(["kept"]) == {"kept": (4.0, None)}


@pytest.mark.parametrize("failure_after_success", [True, False])
def test_a_success_beats_a_failure_in_either_order(tmp_path, failure_after_success, read_path):
    directory = tmp_path / "cache"
    writes = [[row("k", 3.0)], [row("k", None, "HTTP 500"), row("f", None, "HTTP 503")]]
    for rows in writes if failure_after_success else writes[::-1]:
        JudgeCache(directory).put(rows)  # separate jobs: one shard each
    cache = JudgeCache(directory)
    assert len(cache.shards()) == 2
    assert cache.get(["k", "f"]) == {"k": (3.0, None), "f": (None, "HTTP 503")}
    assert compact(directory).rows_kept == 2
    assert cache.get(["k", "f"]) == {"k": (3.0, None), "f": (None, "HTTP 503")}


def test_reruns_after_concurrent_jobs_call_the_judge_only_for_new_answers(tmp_path):
    directory = str(tmp_path / "cache")
    answers = [f"the red circle moves {i} times ." for i in range(12)]
    jobs = [answers[:8], answers[4:]]  # answers 4-7 are judged by both jobs: a race
    start = SPAWN.Event()
    with EmbeddedJudge() as judge:
        processes = [
            SPAWN.Process(target=judge_in_a_job, args=(directory, judge.base_url, job, start))
            for job in jobs
        ]
        for process in processes:
            process.start()
        start.set()
        join_all(processes)
        assert 12 <= judge.requests <= 16
        before = judge.requests
        fresh = [*answers, REFERENCE, "a blue square ."]
        rerun = JudgeClient(JudgeEndpoint(judge.base_url, "toy-judge", backoff_s=0.01))
        judged = judge_items([vdd(a) for a in fresh], rerun, JudgeCache(directory))
        assert judge.requests - before == rerun.calls == 2
    assert [j.cached for j in judged] == [True] * 12 + [False, False]
    assert judged[12].score == 5.0
    # each job left one shard, the rerun a third
    assert len(JudgeCache(directory).shards()) == 3


def test_a_job_leaves_one_shard_however_often_it_flushed(tmp_path, monkeypatch):
    monkeypatch.setattr(judge_package, "FLUSH_EVERY", 2)
    cache = JudgeCache(tmp_path / "cache")
    items = [vdd(f"answer {i} .") for i in range(7)]
    with EmbeddedJudge() as judge:
        judge_items(items, JudgeClient(JudgeEndpoint(judge.base_url, "toy-judge")), cache, 1)
    (shard,) = cache.shards()
    assert sorted(pq.read_table(shard)["key"].to_pylist()) == sorted(
        cache_key("toy-judge", item) for item in items
    )


def test_the_earlier_single_file_cache_is_served_then_moved_in(tmp_path, read_path):
    directory = tmp_path / "cache"
    paid, failed = vdd(REFERENCE), vdd("a blue square .")
    legacy = [
        row(cache_key("toy-judge", paid), 5.0),
        row(cache_key("toy-judge", failed), None, "HTTP 500"),
    ]
    # as earlier versions wrote it: one Parquet file, results/judge/cache.parquet
    pq.write_table(pa.Table.from_pylist(legacy, schema=JUDGE_CACHE), tmp_path / "cache.parquet")
    with EmbeddedJudge() as judge:
        client = JudgeClient(JudgeEndpoint(judge.base_url, "toy-judge"))
        served, retried = judge_items([paid, failed], client, JudgeCache(directory))
    assert served.cached and served.score == 5.0 and client.calls == 1
    assert not retried.cached and retried.score is not None

    done = compact(directory)
    assert (done.merged_files, done.rows_kept) == (2, 2)
    assert not (tmp_path / "cache.parquet").exists()
    cache = JudgeCache(directory)
    assert cache.shards() == [done.path]
    keys = [cache_key("toy-judge", item) for item in (paid, failed)]
    assert cache.get(keys) == {keys[0]: (5.0, None), keys[1]: (retried.score, None)}


def test_the_cache_is_named_by_its_directory(tmp_path):
    with pytest.raises(ValueError, match="the cache is a directory"):
        JudgeCache(tmp_path / "cache.parquet")
    assert JudgeCache(tmp_path / "cache").get(["k"]) == {}  # an absent cache is empty
    assert compact(tmp_path / "cache").path is None


def test_a_lookup_finds_each_key_in_whichever_shard_holds_it(tmp_path, read_path):
    directory = tmp_path / "cache"
    keys = [f"k{i}" for i in range(300)]
    for s in range(30):
        JudgeCache(directory).put(row(k, float(i % 6)) for i, k in enumerate(keys) if i % 30 == s)
    wanted = random.Random(0).sample(keys, 50)
    found = JudgeCache(directory).get(wanted)
    assert found == {k: (float(keys.index(k) % 6), None) for k in wanted}


def test_a_cache_under_a_path_with_glob_characters_reads_only_its_own_shards(tmp_path, read_path):
    # DuckDB would read "run[1]/cache/x.parquet" as a pattern matching run1/cache/x.parquet
    mine, other = tmp_path / "run[1]" / "cache", tmp_path / "run1" / "cache"
    JudgeCache(other).put([row("k", 1.0)])
    name = os.path.basename(JudgeCache(other).shards()[0])
    (mine / name).parent.mkdir(parents=True)
    pq.write_table(JudgeCache(other).rows().set_column(4, "score", pa.array([5.0])), mine / name)
    assert JudgeCache(mine).get(["k"]) == {"k": (5.0, None)}


def test_the_compact_command_merges_every_shard_into_one(tmp_path, capsys):
    from mmspec.cli import main

    directory = tmp_path / "cache"
    for k in range(3):
        JudgeCache(directory).put([row(f"k{k}", float(k))])
    assert len(JudgeCache(directory).shards()) == 3
    assert main(["compact-judge-cache", str(directory)]) == 0
    assert "merged 3 files (3 rows)" in capsys.readouterr().err
    cache = JudgeCache(directory)
    assert len(cache.shards()) == 1
    assert cache.get(["k0", "k1", "k2"]) == {f"k{k}": (float(k), None) for k in range(3)}


def _tear(path: Path) -> bytes:
    """Cut the file at `path` to half its size, as a disk that lost its end would; the bytes."""
    torn = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(torn)
    return torn


@pytest.mark.parametrize("where", ["shard", "earlier single file"])
def test_a_damaged_cache_file_is_named_set_aside_and_its_answers_judged_again(
    tmp_path, read_path, capsys, where
):
    cache = JudgeCache(tmp_path / "judge")
    answers = ["the red circle moves .", "nothing moves ."]
    with EmbeddedJudge() as judge:
        client = JudgeClient(JudgeEndpoint(judge.base_url, "toy-judge", backoff_s=0.01))
        first = judge_items([vdd(answers[0])], client, JudgeCache(cache.directory))
        # a second job's shard, left whole
        judge_items([vdd(answers[1])], client, JudgeCache(cache.directory))
        damaged = Path(cache.shards()[0])
        if where == "earlier single file":
            damaged = damaged.rename(cache.legacy_path)
        torn = _tear(damaged)
        calls = judge.requests
        again = judge_items([vdd(a) for a in answers], client, cache)
        assert judge.requests == calls + 1  # only the damaged file's answer
        assert not again[0].cached and again[0].score == first[0].score
        assert again[1].cached
    err = capsys.readouterr().err
    assert f"judgement cache file {damaged} is damaged or not a judgement cache (" in err
    assert "the answers it held are judged again" in err
    aside = Path(f"{damaged}.damaged")
    assert f"set aside as {aside}" in err
    assert aside.read_bytes() == torn and not damaged.exists()  # kept, never read again
    assert str(aside) not in cache.shards()
    assert cache.get(cache_key("toy-judge", vdd(a)) for a in answers).keys() == {
        cache_key("toy-judge", vdd(a)) for a in answers
    }
    assert compact(cache.directory).rows_kept == 2 and aside.exists()


def test_a_damaged_shard_is_left_out_of_a_compaction(tmp_path, capsys):
    directory = tmp_path / "cache"
    for k in range(3):
        JudgeCache(directory).put([row(f"k{k}", float(k))])
    damaged = Path(JudgeCache(directory).shards()[1])
    damaged.write_text("not parquet")
    done = compact(directory)
    assert (done.merged_files, done.rows_kept) == (2, 2)
    assert f"judgement cache file {damaged} is damaged" in capsys.readouterr().err
    assert JudgeCache(directory).get(["k0", "k1", "k2"]) == {"k0": (0.0, None), "k2": (2.0, None)}
    assert Path(f"{damaged}.damaged").read_text() == "not parquet"


def test_a_file_system_error_is_an_error_and_sets_nothing_aside(tmp_path, monkeypatch):
    """An I/O error says nothing about the shard (it may be whole): the lookup stops, naming it.
    (A disk's I/O error cannot be made for real here: pyarrow's is raised in its place.)"""
    cache = JudgeCache(tmp_path / "cache")
    shard = cache.put([row("k", 1.0)])

    def failing_disk(path, *args, **kwargs):
        raise OSError(errno.EIO, f"[Errno 5] Failed reading {path}. Detail: Input/output error")

    monkeypatch.setattr(cache_module.pq, "ParquetFile", failing_disk)
    with pytest.raises(JudgeCacheError, match=re.escape(shard) + " cannot be read .*Errno 5"):
        cache.get(["k"])
    monkeypatch.undo()
    assert os.listdir(cache.directory) == [os.path.basename(shard)]
    assert cache.get(["k"]) == {"k": (1.0, None)}
