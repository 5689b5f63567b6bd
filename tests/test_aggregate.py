"""Stage aggregate's cost model (Eq. 1's estimate, and Eq. 1 with the measured verification
cost, from the per-sample timings the score stage passes through), its retentions' intervals,
and its files: read in batches, exactly the sweep's (`--sweep`), one cell per file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import scale_sweep

from mmspec import cli
from mmspec.stages import aggregate
from mmspec.stages.aggregate import retention_interval, tau_interval
from mmspec.storage.tables import BLOCKS, SCORES, read_table, write_table
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep.cell_metrics import CELLS


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


def test_tau_pools_steps_and_its_interval_is_of_the_pooled_ratio(tmp_path):
    """Half the samples accept 9 tokens in 1 step, half 9 tokens in 9 steps: tau pooled over
    steps is 900 / 500 = 1.8, a mean of the samples' ratios would be 5. The cell's tau and its
    interval are of the pooled ratio (tau_per_sample keeps the mean of ratios)."""
    samples = [(1, 9, 0.01)] * 50 + [(9, 9, 0.01)] * 50
    cell_file = _scores(tmp_path, "sd", samples, 5, 0.0004, 0.002)
    out = tmp_path / "cells.parquet"
    aggregate.run([cell_file], str(out), str(tmp_path / "blocks.parquet"))
    (cell,) = read_table(out, CELLS).to_pylist()
    assert cell["tau"] == pytest.approx(1.8) and cell["tau_per_sample"] == pytest.approx(5.0)
    order = sorted(range(len(samples)), key=lambda i: f"s{i}")  # the cell's sample order
    tokens, steps = [samples[i][1] for i in order], [samples[i][0] for i in order]
    assert (cell["tau_low"], cell["tau_high"]) == pytest.approx(tau_interval(tokens, steps))
    # around the pooled 1.8, far from the mean of ratios (a bootstrap of it spans about 4-6)
    assert 1.4 < cell["tau_low"] < 1.8 < cell["tau_high"] < 2.4


def test_tau_of_each_turn_pools_that_turns_sample_turns_alone(tmp_path):
    """Ten dialogues of two turns: the first turns accept 8 tokens in 2 steps (tau 4), the
    second 6 in 6 (tau 1). The cell's tau pools both (1.75); tau_turn1 and tau_turn2 each pool
    their own turn, with intervals resampling that turn's sample-turns."""
    samples = [(2, 8, 0.01), (6, 6, 0.01)] * 10
    extra = [{"sample_id": f"s{i // 2:02d}", "turn": i % 2} for i in range(len(samples))]
    first = [(2, 8, 0.01), (3, 9, 0.01)] * 5  # a cell of first turns alone (no second turn)
    cell_file = _scores(tmp_path, "sd", samples, 5, 0.0004, 0.002, extra)
    single = _scores(tmp_path, "one", first, 5, 0.0004, 0.002)
    out = tmp_path / "cells.parquet"
    aggregate.run([cell_file, single], str(out), str(tmp_path / "blocks.parquet"))
    cells = {r["method"]: r for r in read_table(out, CELLS).to_pylist()}
    cell = cells["sd"]
    assert cell["tau"] == pytest.approx(140 / 80)
    assert cell["tau_turn1"] == pytest.approx(4.0) and cell["tau_turn2"] == pytest.approx(1.0)
    assert (cell["tau_turn1_low"], cell["tau_turn1_high"]) == pytest.approx((4.0, 4.0))
    assert (cell["tau_turn2_low"], cell["tau_turn2_high"]) == pytest.approx((1.0, 1.0))
    one = cells["one"]
    assert one["tau_turn1"] == pytest.approx(one["tau"]) and one["tau_turn2"] is None
    assert (one["tau_turn1_low"], one["tau_turn1_high"]) == pytest.approx(
        (one["tau_low"], one["tau_high"])
    )
    assert one["tau_turn1_low"] < one["tau_turn1_high"]
    assert one["tau_turn2_low"] != one["tau_turn2_low"]  # NaN: no second turn


def test_tau_interval():
    # every sample at the same ratio: no spread to resample
    assert tau_interval([10, 20, 30], [2, 4, 6]) == pytest.approx((5.0, 5.0))
    # resampling the sample-turns: the same seed gives the same interval, more samples of the
    # same spread a narrower one, and every bound lies between the samples' own ratios
    tokens, steps = [12, 3, 8, 20, 5, 9], [3, 3, 2, 4, 5, 3]
    low, high = tau_interval(tokens, steps)
    assert tau_interval(tokens, steps) == (low, high)
    assert 1.0 <= low < sum(tokens) / sum(steps) < high <= 5.0
    wide_low, wide_high = tau_interval(tokens * 10, steps * 10)
    assert high - low > wide_high - wide_low
    # no sample-turn: no interval
    low, high = tau_interval([], [])
    assert low != low and high != high  # NaN


# ---- the files: batches, the sweep's own, one cell per file ------------------------------------


def _small_sweep(seeds: int = 2) -> dict:
    """A validated sweep of 2 datasets x seeds x (AR + SD at gamma 1..99), 200 cells per seed."""
    return mmconfig.validate(scale_sweep.sweep_config(seeds))


def _tables(out, blocks) -> tuple[pd.DataFrame, pd.DataFrame]:
    return read_table(out, CELLS).to_pandas(), read_table(blocks, BLOCKS).to_pandas()


def test_batches_give_the_tables_of_one_query(tmp_path):
    cells = mmcells.cells(_small_sweep(1))[:30]
    # in cell order, as `score_files` gives them: the blocks then come in one query's order
    cells.sort(key=lambda c: (c.dataset, c.pair, c.method, c.hp, c.seed))
    files = []
    for cell in cells:
        path = tmp_path / "results" / "score" / cell.path / "scores.parquet"
        write_table(pa.Table.from_pylist(scale_sweep.cell_rows(cell), schema=SCORES), path, SCORES)
        files.append(str(path))
    one = [tmp_path / "one_cells.parquet", tmp_path / "one_blocks.parquet"]
    batched = [tmp_path / "batched_cells.parquet", tmp_path / "batched_blocks.parquet"]
    assert aggregate.run(files, *map(str, one), batch_files=len(files)) == 30
    # batches of 7 files: five queries, the last one short
    assert aggregate.run(files, *map(str, batched), batch_files=7) == 30
    one_cells, one_blocks = _tables(*one)
    batched_cells, batched_blocks = _tables(*batched)
    # every column of every cell, in the same order (NaN equal to NaN)
    pd.testing.assert_frame_equal(batched_cells, one_cells)
    assert len(one_blocks) == sum(
        r["steps"] for c in cells if c.spec.method != "ar" for r in scale_sweep.cell_rows(c)
    )
    pd.testing.assert_frame_equal(batched_blocks, one_blocks)
    keys = list(batched_cells[aggregate.CELL_KEY].itertuples(index=False))
    assert keys == sorted(keys) and len(set(keys)) == 30


@pytest.mark.parametrize("batch_files", [1, 10])
def test_a_cell_in_two_score_files_is_refused(tmp_path, batch_files):
    sd = _scores(tmp_path, "sd", [(4, 20, 0.01)], 5, 0.0004, 0.002)
    copy = tmp_path / "again" / "sd.parquet"
    copy.parent.mkdir()
    copy.write_bytes(Path(sd).read_bytes())
    out, blocks = tmp_path / "cells.parquet", tmp_path / "blocks.parquet"
    with pytest.raises(ValueError, match="one score file holds one cell") as error:
        aggregate.run([sd, str(copy)], str(out), str(blocks), batch_files=batch_files)
    assert "method=sd" in str(error.value)
    # nothing half-written is left behind
    assert not out.exists() and not blocks.exists()
    assert list(tmp_path.glob(".*.tmp")) == []


def test_missing_score_file_is_named(tmp_path):
    sd = _scores(tmp_path, "sd", [(4, 20, 0.01)], 5, 0.0004, 0.002)
    gone = str(tmp_path / "gone" / "scores.parquet")
    with pytest.raises(FileNotFoundError, match="1 score file.*gone/scores.parquet"):
        aggregate.run([sd, gone], str(tmp_path / "c.parquet"), str(tmp_path / "b.parquet"))


def test_the_sweeps_own_score_files(tmp_path):
    sweep = _small_sweep(2)
    files = aggregate.sweep_score_files(sweep, tmp_path / "results")
    cells = mmcells.cells(sweep)
    assert len(files) == len(cells) == 400
    assert set(files) == {
        f"{tmp_path.as_posix()}/results/score/{c.path}/scores.parquet" for c in cells
    }
    # by cell key, seeds as numbers (seed 10 after seed 9)
    assert files == sorted(files, key=lambda f: files.index(f))


def test_cli_aggregates_a_sweep_from_its_config_not_a_glob(tmp_path, monkeypatch):
    sweep = mmconfig.validate(
        {**scale_sweep.sweep_config(2), "methods": {"ar": {}, "sd": {"gamma": [2, 3]}}}
    )
    sweep["datasets"]["toy_vqa"]["group"] = "ood"
    cells = mmcells.cells(sweep)
    for cell in cells:
        path = tmp_path / "results" / "score" / cell.path / "scores.parquet"
        write_table(pa.Table.from_pylist(scale_sweep.cell_rows(cell), schema=SCORES), path, SCORES)
    # a score file of a cell the sweep no longer has: left out
    stale = mmcells.cells(mmconfig.validate(scale_sweep.sweep_config(3)))[-1]
    path = tmp_path / "results" / "score" / stale.path / "scores.parquet"
    write_table(pa.Table.from_pylist(scale_sweep.cell_rows(stale), schema=SCORES), path, SCORES)
    monkeypatch.chdir(tmp_path)
    args = ["aggregate", "--out", "cells.parquet", "--blocks", "blocks.parquet"]
    assert cli.main([*args, "--sweep", json.dumps(sweep)]) == 0
    rows = read_table(tmp_path / "cells.parquet", CELLS).to_pylist()
    assert {(r["dataset"], r["method"], r["hp"], r["seed"]) for r in rows} == {
        (c.dataset, c.method, c.hp, c.seed) for c in cells
    }
    assert {r["dataset"]: r["group"] for r in rows} == {
        "toy_caption": "benchmark",
        "toy_vqa": "ood",
    }
    # the same files listed in a file, by hand
    listed = tmp_path / "files.txt"
    listed.write_text("\n".join(aggregate.sweep_score_files(sweep)) + "\n")
    hand = ["aggregate", "--out", "hand.parquet", "--blocks", "hand_blocks.parquet"]
    assert cli.main([*hand, "--scores-from", str(listed)]) == 0
    by_hand = read_table(tmp_path / "hand.parquet", CELLS).to_pylist()
    assert [r["tau"] for r in by_hand] == [r["tau"] for r in rows]
    assert {r["group"] for r in by_hand} == {"benchmark"}  # no groups given


def test_cli_refuses_groups_beside_a_sweep(tmp_path, capsys):
    args = ["aggregate", "--out", "c.parquet", "--blocks", "b.parquet"]
    sweep = json.dumps(_small_sweep(1))
    assert cli.main([*args, "--sweep", sweep, "--groups", "{}"]) == 1
    assert "--groups comes from --sweep" in capsys.readouterr().err
    empty = tmp_path / "none.txt"
    empty.write_text("\n")
    assert cli.main([*args, "--scores-from", str(empty)]) == 1
    assert f"{empty}: lists no files" in capsys.readouterr().err
