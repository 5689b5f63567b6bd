"""Stage aggregate's cost model (Eq. 1's estimate, and Eq. 1 with the measured verification
cost, from the per-sample timings the score stage passes through) and its retentions'
intervals."""

from __future__ import annotations

import pyarrow as pa
import pytest

from mmspec.stages import aggregate
from mmspec.stages.aggregate import retention_interval
from mmspec.tables import CELLS, SCORES, read_table, write_table


def _scores(tmp_path, method, samples, k, t_q, t_p, extra=None):
    """A cell's score rows: per sample (steps, new tokens, summed verification time), and the
    columns of `extra` (one dict per sample) on top."""
    rows = [
        {
            "dataset": "toy_caption",
            "pair": "p",
            "method": method,
            "hp": "default",
            "hparams": "{}",
            "seed": 0,
            "registry_method": method,
            "sample_id": f"s{i}",
            "turn": 0,
            "steps": steps,
            "new_tokens": new,
            "accepted_sum": new - steps,
            "drafted_sum": steps * (k or 0),
            "verify_s": verify_s,
            "decode_s": 1.0,
            "ar_decode_s": 2.0,
            "ar_n_tokens": new + 1,
            "t_q_s": t_q,
            "t_p_s": t_p,
            "draft_forwards_per_step": k,
        }
        for i, (steps, new, verify_s) in enumerate(samples)
    ]
    for row, more in zip(rows, extra or [{}] * len(rows), strict=True):
        row.update(more)
    path = tmp_path / f"{method}.parquet"
    write_table(pa.Table.from_pylist(rows, schema=SCORES), path, SCORES)
    return str(path)


def test_verify_cost_pools_steps_and_replaces_eq1s_one(tmp_path):
    t_p, t_q = 0.002, 0.0004
    # 10 steps in all, 0.03 s of verification: v = 0.003 / 0.002 = 1.5
    sd = _scores(tmp_path, "sd", [(4, 20, 0.010), (6, 30, 0.020)], 5, t_q, t_p)
    ar = _scores(tmp_path, "ar", [(20, 20, 0.044)], None, None, t_p)
    out = tmp_path / "cells.parquet"
    aggregate.run([sd, ar], str(out), str(tmp_path / "blocks.parquet"))
    cells = {r["method"]: r for r in read_table(out, CELLS).to_pylist()}
    cell = cells["sd"]
    c = t_q / t_p
    assert cell["tau"] == pytest.approx(5.0) and cell["latency_ratio"] == pytest.approx(c)
    assert cell["verify_cost"] == pytest.approx(1.5)
    assert cell["speedup_eq1"] == pytest.approx(5.0 / (5 * c + 1))
    assert cell["speedup_eq1_verify"] == pytest.approx(5.0 / (5 * c + 1.5))
    # AR: no draft, so both estimates are its tau; its steps cost AR steps (1.1 here)
    assert cells["ar"]["verify_cost"] == pytest.approx(1.1)
    assert cells["ar"]["speedup_eq1"] == cells["ar"]["speedup_eq1_verify"] == pytest.approx(1.0)


def test_cells_table_has_both_retentions_intervals(tmp_path):
    quality, ar_quality = [1.0, 0.5, 0.8, 0.9], [1.0, 1.0, 0.8, 1.0]
    judge, ar_judge = [5.0, None, 3.0, 4.0], [5.0, 4.0, 4.0, 4.0]
    extra = [
        {"quality": q, "ar_quality": a, "judge_score": j, "ar_judge_score": aj}
        | ({} if j is not None else {"judge_error": "HTTP 500"})
        for q, a, j, aj in zip(quality, ar_quality, judge, ar_judge, strict=True)
    ]
    loose = _scores(tmp_path, "loose", [(5, 10, 0.01)] * 4, 10, 0.0004, 0.002, extra)
    out = tmp_path / "cells.parquet"
    aggregate.run([loose], str(out), str(tmp_path / "blocks.parquet"))
    (cell,) = read_table(out, CELLS).to_pylist()
    assert (cell["retention_low"], cell["retention_high"]) == pytest.approx(
        retention_interval(quality, ar_quality)
    )
    assert cell["retention_low"] < cell["retention"] < cell["retention_high"]
    # the failed judgement is left out of the interval as of the retention itself
    assert cell["judge_retention"] == pytest.approx(12 / 13)
    low, high = retention_interval(judge, ar_judge)
    assert (cell["judge_retention_low"], cell["judge_retention_high"]) == pytest.approx((low, high))
    assert low < 12 / 13 <= high
