"""The judge stage over a cell's tables, against the embedded judge (a real local HTTP server):
judgements per sample-turn, the shared cache directory on rerun, a refused endpoint, and score's
columns."""

from __future__ import annotations

import json
import socket

import pyarrow as pa
import pytest

from mmspec.data import media
from mmspec.scoring.judge import JudgeCache, JudgeUnreachable
from mmspec.stages import judge
from mmspec.stages.score import _add_judgements
from mmspec.storage.tables import JUDGEMENTS, PREPARED, SAMPLES, read_table, write_table
from mmspec.sweep.settings import EMBEDDED_JUDGE
from mmspec.toy import world as toyworld

CELL = {"dataset": "toy_vdesc", "pair": "p", "method": "m", "hp": "default", "hparams": "{}"}
SETTINGS = {
    "endpoint": EMBEDDED_JUDGE,
    "model": "mmspec-toy-judge",
    "api_key_env": None,
    "concurrency": 3,
    "requests_per_s": None,
    "timeout_s": 10,
    "max_retries": 2,
    "backoff_s": 0.01,
    "max_backoff_s": 0.05,
}


@pytest.fixture
def cell_tables(tmp_path):
    """A prepared toy_vdesc dataset and a cell that answers half of it right, half wrong."""
    rows = toyworld.generate_dataset("toy_vdesc", 6, seed=3)
    prepared = tmp_path / "prepared.parquet"
    write_table(pa.Table.from_pylist(rows, schema=PREPARED), prepared, PREPARED)
    samples = []
    for i, row in enumerate(rows):
        wrong = "the red circle stays at the top left ."  # states no motion of the video
        text = row["reference"] if i % 2 == 0 else wrong
        samples.append(
            {**CELL, "seed": 0, "sample_id": row["sample_id"], "turn": 0, "output_text": text}
        )
    path = tmp_path / "samples.parquet"
    write_table(pa.Table.from_pylist(samples, schema=SAMPLES), path, SAMPLES)
    return str(path), str(prepared)


def test_judges_every_answer_then_serves_the_cache(cell_tables, tmp_path):
    samples, prepared = cell_tables
    cache, out = str(tmp_path / "cache"), str(tmp_path / "j1.parquet")
    calls, failures, n = judge.run(samples, prepared, "vdd", SETTINGS, cache, out)
    assert (calls, failures, n) == (6, 0, 6)
    rows = read_table(out, JUDGEMENTS).to_pylist()
    scores = [r["judge_score"] for r in rows]
    assert scores[0::2] == [5.0, 5.0, 5.0] and max(scores[1::2]) < 5.0
    assert not any(r["cached"] for r in rows) and rows[0]["template"] == "vdd"
    assert len(JudgeCache(cache).shards()) == 1  # the job's judgements, in a shard of its own
    # a rerun (another cell with the same answers, or the same one again) calls nothing
    again = str(tmp_path / "j2.parquet")
    assert judge.run(samples, prepared, "vdd", SETTINGS, cache, again) == (0, 0, 6)
    rerun = read_table(again, JUDGEMENTS).to_pylist()
    assert [r["judge_score"] for r in rerun] == scores and all(r["cached"] for r in rerun)
    assert len(JudgeCache(cache).shards()) == 1  # a rerun that judged nothing wrote nothing


def test_a_refused_endpoint_stops_the_job_and_writes_nothing(cell_tables, tmp_path):
    samples, prepared = cell_tables
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    out = tmp_path / "j.parquet"
    with pytest.raises(JudgeUnreachable, match=f"127.0.0.1:{port}"):
        judge.run(
            samples,
            prepared,
            "vdd",
            {**SETTINGS, "endpoint": url},
            str(tmp_path / "cache"),
            str(out),
        )
    assert not out.exists()


def test_score_reads_judgements_and_failures_stay_null(tmp_path):
    def table(path, scores):
        rows = [
            {
                **CELL,
                "seed": 0,
                "sample_id": f"s{i}",
                "turn": 0,
                "judge_model": "j",
                "template": "vdd",
                "judge_score": s,
                "judge_error": None if s is not None else "boom",
                "cached": False,
            }
            for i, s in enumerate(scores)
        ]
        write_table(pa.Table.from_pylist(rows, schema=JUDGEMENTS), path, JUDGEMENTS)
        return str(path)

    mine = table(tmp_path / "m.parquet", [4.0, None, 2.0])
    ar = table(tmp_path / "a.parquet", [5.0, 5.0, 2.0])
    records = [{"sample_id": f"s{i}", "turn": 0} for i in range(3)]
    _add_judgements(records, mine, ar)
    assert [r["judge_score"] for r in records] == [4.0, None, 2.0]
    assert [r["ar_judge_score"] for r in records] == [5.0, 5.0, 2.0]
    assert records[1]["judge_error"] == "boom"
    with pytest.raises(KeyError, match="s3"):
        _add_judgements([{"sample_id": "s3", "turn": 0}], mine, ar)


def test_question_is_the_last_user_text():
    messages = json.dumps(
        [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "first ?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "an answer ."}]},
            {"role": "user", "content": [{"type": "text", "text": "describe the video ."}]},
        ]
    )
    question = media.prompt_text(json.loads(messages), "prepared.parquet", text_only=False)
    assert question == "describe the video ."


def test_aggregate_counts_failures_and_takes_retention_over_both_judged(tmp_path):
    from mmspec.stages import aggregate
    from mmspec.storage.tables import SCORES
    from mmspec.sweep.cell_metrics import CELLS

    def scores(method, judged):
        rows = []
        for i, (score, ar_score) in enumerate(judged):
            rows.append(
                {
                    **CELL,
                    "method": method,
                    "seed": 0,
                    "sample_id": f"s{i}",
                    "turn": 0,
                    "registry_method": method,
                    "acceptance": "lvspec",
                    "temperature": 0.0,
                    "steps": 4,
                    "new_tokens": 8,
                    "accepted_sum": 4,
                    "relaxed_sum": 1,
                    "drafted_sum": 8,
                    "decode_s": 1.0,
                    "ar_decode_s": 2.0,
                    "ar_n_tokens": 9,
                    "quality": 1.0,
                    "ar_quality": 1.0,
                    "judge_score": score,
                    "ar_judge_score": ar_score,
                    "judge_error": "timed out" if score is None and ar_score is not None else None,
                }
            )
        path = tmp_path / f"{method}.parquet"
        write_table(pa.Table.from_pylist(rows, schema=SCORES), path, SCORES)
        return str(path)

    judged = scores("lvspec", [(4.0, 5.0), (None, 5.0), (3.0, None), (2.0, 2.0)])
    plain = scores("sd", [(None, None), (None, None)])
    out, blocks = tmp_path / "cells.parquet", tmp_path / "blocks.parquet"
    aggregate.run([judged, plain], str(out), str(blocks))
    cells = {r["method"]: r for r in read_table(out, CELLS).to_pylist()}
    lv = cells["lvspec"]
    # only s0 and s3 have both judgements: (4 + 2) / (5 + 2); s1's failure is counted, not scored
    assert lv["judge_score"] == pytest.approx(3.0) and lv["ar_judge_score"] == pytest.approx(3.5)
    assert lv["judge_retention"] == pytest.approx(6 / 7) and lv["judge_failures"] == 1
    assert lv["relaxed_share"] == pytest.approx(0.25)
    assert cells["sd"]["judge_failures"] is None and cells["sd"]["judge_retention"] is None
