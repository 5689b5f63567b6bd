"""`mmspec plan`: cells done and to run, packed Slurm jobs, hours from the pairs' earlier cells."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from mmspec import config as mmconfig
from mmspec import plan

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def test_slurm_profile_packs_generate_jobs(tmp_path):
    assert plan.group_size(ROOT / "slurm" / "config.yaml") == 8
    (tmp_path / "profile.yaml").write_text("jobs: 10\n")
    assert plan.group_size(tmp_path / "profile.yaml") is None


def test_plan_counts_done_cells_and_estimates_from_earlier_ones(tiny_run):
    results = tiny_run / "results"
    cfg = mmconfig.load(TINY)
    cells = mmconfig.cells(cfg)
    done = plan.plan(cfg, results)
    assert sum(p.cells for p in done.values()) == len(cells)
    assert all(p.done == p.cells for p in done.values())

    # a second seed: every cell again, timed like the first seed's cells
    more = plan.plan(mmconfig.merge(cfg, {"seeds": [0, 1]}), results)
    toy = more["toy"]
    assert (toy.cells, toy.done) == (2 * len(cells), len(cells))
    files = list(results.glob("generate/dataset=*/pair=toy/*/*/*/samples.parquet"))
    tables = [pq.read_table(f).to_pandas() for f in files]
    seconds = sum(float(t[plan.TIMED].sum().sum()) for t in tables)
    turns = sum(len(t) for t in tables)
    assert toy.earlier_cells == len(files) == len(cells)
    assert math.isclose(toy.seconds_per_turn, seconds / turns)
    assert toy.sample_turns == turns  # the same datasets again
    assert math.isclose(toy.hours, seconds / 3600)

    text = plan.render(more, 8, timing=cfg["timing"])
    first = f"cells: {2 * len(cells)} ({len(cells)} done, {len(cells)} to run)"
    assert text.startswith(first)
    assert f"-> {math.ceil(len(cells) / 8)} Slurm jobs of up to 8 cells" in text
    assert "device-hours on cpu" in text

    # the cost model, with the share of the method cells' time their AR probes took
    method = [t for t, f in zip(tables, files, strict=True) if "/method=ar/" not in f.as_posix()]
    probes = sum(float(t[plan.REFERENCE].sum().sum()) for t in method)
    share = probes / sum(float(t[plan.TIMED].sum().sum()) for t in method)
    assert math.isclose(toy.reference_share, share) and 0 < share < 0.5
    steps = cfg["timing"]["ar_probe_tokens"]
    assert f"an AR probe of each for its speedup (AR's prefill and {steps} steps)" in text
    assert f"the probes took {share:.0%}-{share:.0%} of the decoding time" in text


def test_plan_command_without_earlier_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mmspec.cli", "plan", str(TINY), "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    n = len(mmconfig.cells(mmconfig.load(TINY)))
    assert out.startswith(f"cells: {n} (0 done, {n} to run)")
    assert "no earlier run of this pair, no estimate" in out


def test_an_estimate_reads_a_bounded_number_of_earlier_cells(tiny_run, monkeypatch):
    """However many cells a pair finished, the estimate reads at most EARLIER_CELLS of them."""
    monkeypatch.setattr(plan, "EARLIER_CELLS", 2)
    results = tiny_run / "results"
    files = sorted(results.glob("generate/dataset=*/pair=toy/*/*/*/samples.parquet"))
    assert len(files) > 2
    toy = plan.plan(mmconfig.load(TINY), results)["toy"]
    read = files[:: math.ceil(len(files) / 2)]
    tables = [pq.read_table(f).to_pandas() for f in read]
    seconds = sum(float(t[plan.TIMED].sum().sum()) for t in tables)
    assert toy.earlier_cells == len(read) == 2
    assert math.isclose(toy.seconds_per_turn, seconds / sum(len(t) for t in tables))
