"""`mmspec plan`: cells done and to run, packed Slurm jobs, hours from the pairs' earlier cells."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from mmspec.planning import plan, stage_costs
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def test_slurm_profile_packs_generate_jobs(tmp_path):
    assert plan.group_size(ROOT / "slurm" / "config.yaml") == 8
    (tmp_path / "profile.yaml").write_text("jobs: 10\n")
    assert plan.group_size(tmp_path / "profile.yaml") is None


def _seconds(table) -> float:
    """A cell's timed seconds; an AR cell's AR timing is its own decode, counted once."""
    own_ar = table["registry_method"].iloc[0] == "ar"
    timed = [c for c in plan.TIMED if not (own_ar and c in plan.REFERENCE)]
    return float(table[timed].sum().sum())


def test_plan_counts_done_cells_and_estimates_from_earlier_ones(tiny_run):
    results = tiny_run / "results"
    cfg = mmconfig.load(TINY)
    cells = mmcells.cells(cfg)
    done = plan.plan(cfg, results).pairs
    assert sum(p.cells for p in done.values()) == len(cells)
    assert all(p.done == p.cells for p in done.values())

    # a second seed: every cell again, timed like the first seed's cells
    more = plan.plan(mmconfig.merge(cfg, {"seeds": [0, 1]}), results)
    toy = more.pairs["toy"]
    assert (toy.cells, toy.done) == (2 * len(cells), len(cells))
    files = list(results.glob("generate/dataset=*/pair=toy/*/*/*/samples.parquet"))
    tables = [pq.read_table(f).to_pandas() for f in files]
    # an AR cell's AR timing is its own decode: counted once
    seconds = sum(_seconds(t) for t in tables)
    turns = sum(len(t) for t in tables)
    assert toy.earlier_cells == len(files) == len(cells)
    assert math.isclose(toy.seconds_per_turn, seconds / turns)
    assert toy.sample_turns == turns  # the same datasets again
    assert math.isclose(toy.hours, seconds / 3600)

    text = plan.render(more, 8, timing=cfg["timing"])
    first = f"cells: {2 * len(cells)} ({len(cells)} done, {len(cells)} to run)"
    assert text.startswith(first)
    # a generate job per dataset, pair, method and seed (up to batch_cells cells); each AR
    # one a Slurm job of its own, the others packed 8 to one
    groups = {(c.dataset, c.pair, c.method) for c in cells}
    ar = sum(c.spec.method == "ar" for c in cells)
    slurm = math.ceil((len(groups) - ar) / 8) + ar
    assert (
        f"-> {len(groups)} generate jobs of up to 16 cells each (batch_cells) -> {slurm} Slurm "
        f"jobs: {ar} of AR cells on their own, the method cells' packed 8 to a Slurm job"
    ) in text
    assert re.search(r"about \d+\.\d\d device-hours \(\d+\.\d min\) on cpu", text)

    # the cost model, with the share of the method cells' time their AR probes took
    method = [t for t in tables if t["registry_method"].iloc[0] != "ar"]
    probes = sum(float(t[plan.REFERENCE].sum().sum()) for t in method)
    share = probes / sum(float(t[plan.TIMED].sum().sum()) for t in method)
    assert math.isclose(toy.reference_share, share) and 0 < share < 0.5
    steps = cfg["timing"]["ar_probe_tokens"]
    assert f"an AR probe of each for its speedup (AR's first {steps} steps)" in text
    assert f"; {share:.0%} of its earlier method cells' decoding time was the AR timing" in text


def test_plan_command_without_earlier_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mmspec.cli", "plan", str(TINY), "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    n = len(mmcells.cells(mmconfig.load(TINY)))
    assert out.startswith(f"cells: {n} (0 done, {n} to run)")
    assert "no earlier run of this pair, no estimate" in out
    # no pair has an estimate: said so, never a total of 0 device-hours
    assert "estimated: no estimate: 1 pair to run, none with finished cells" in out
    assert "0.00 device-hours" not in out


def test_the_total_counts_the_pairs_with_and_without_an_estimate():
    timed = plan.PairPlan(cells=4, sample_turns=3600, seconds_per_turn=2.0)
    untimed = plan.PairPlan(cells=2, sample_turns=10)
    text = plan.render(_plan({"a": timed, "b": untimed}), None)
    total = next(line for line in text.splitlines() if line.startswith("estimated: "))
    assert total.startswith("estimated: 2.00 device-hours for the 1 pair with an estimate")
    assert total.endswith("; 1 more without one")
    done = plan.PairPlan(cells=2, done=2)
    assert "estimated: nothing to run" in plan.render(_plan({"a": done}), None)


def _plan(pairs: dict) -> plan.Plan:
    return plan.Plan(pairs, {}, Path("results"))


def test_an_estimate_reads_a_bounded_number_of_earlier_cells(tiny_run, monkeypatch):
    """However many cells a pair finished, the estimate reads at most EARLIER_CELLS of them."""
    monkeypatch.setattr(plan, "EARLIER_CELLS", 2)
    results = tiny_run / "results"
    files = sorted(results.glob("generate/dataset=*/pair=toy/*/*/*/samples.parquet"))
    assert len(files) > 2
    toy = plan.plan(mmconfig.load(TINY), results).pairs["toy"]
    read = files[:: math.ceil(len(files) / 2)]
    tables = [pq.read_table(f).to_pandas() for f in read]
    seconds = sum(_seconds(t) for t in tables)
    assert toy.earlier_cells == len(read) == 2
    assert math.isclose(toy.seconds_per_turn, seconds / sum(len(t) for t in tables))


def test_the_slurm_profile_packs_method_cells_and_runs_each_ar_cell_alone(tmp_path):
    """Every method cell reads its AR cell's samples; were the AR cells' generate jobs in the
    group too, a group would take in every job of their dataset, pair and seed (the tour: one
    Slurm job of all). The tour's 4 AR jobs run alone, its 32 methods' jobs 8 to a Slurm job, as
    plan says."""
    from workflow_cli import snakemake_cmd

    cmd = snakemake_cmd(tmp_path, ROOT / "config" / "config.yaml", "--profile", "slurm", "-n")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    # each group job's listing runs to the next timestamped line
    groups = re.findall(r"Group job cells \(jobs in lexicogr. order\):(.*?)(?=\n\[|\Z)", text, re.S)
    sizes = [len(re.findall(r"output: results/batches/generate/\S+/done.json", g)) for g in groups]
    cells = mmcells.cells(mmconfig.load(ROOT / "config" / "config.yaml"))
    ar = sum(c.spec.method == "ar" for c in cells)
    assert (ar, len(cells)) == (4, 37)
    # a generate job per dataset, pair, method and seed: lantern_tree's two deltas share one
    assert sorted(sizes, reverse=True) == [8, 8, 8, 8]  # the 32 methods' jobs
    alone = re.findall(r"^rule generate:\n(?:\s+.*\n)*?\s+output: (\S+)", text, re.M)
    assert len(alone) == ar and all("/method=ar/" in path for path in alone)
    planned = plan.render(plan.plan(mmconfig.load(ROOT / "config" / "config.yaml"), tmp_path), 8)
    assert (
        "-> 36 generate jobs of up to 16 cells each (batch_cells) -> 8 Slurm jobs: 4 of AR cells "
        "on their own, the method cells' packed 8 to a Slurm job"
    ) in planned


def _walls(results: Path, stage: str) -> float:
    """The wall seconds of a stage's finished jobs, as their benchmark files record them."""
    return sum(
        float(line.split("\t")[0])
        for tsv in (results / "benchmarks" / stage).rglob("*.tsv")
        for line in tsv.read_text().splitlines()[1:]
    )


def _bytes(results: Path, pattern: str) -> int:
    return sum(p.stat().st_size for p in results.glob(pattern) if p.is_file())


def test_per_stage_costs_from_an_earlier_run(tiny_run, tmp_path):
    """Planned from its own finished run, the same sweep costs what its jobs took: the
    benchmarks' wall seconds of its device stages and the bytes of its outputs. With twice the
    samples, generate's decoding doubles and its loading and warm-up stay once per job."""
    pilot = tiny_run / "results"
    cfg = mmconfig.load(TINY)
    same = plan.plan(cfg, tmp_path / "results", pilot=pilot)
    n = len(mmcells.cells(cfg))
    generate, visual = same.stages["generate"], same.stages["cache_visual"]
    assert generate.jobs == generate.estimated == n
    assert math.isclose(generate.seconds, _walls(pilot, "generate"), rel_tol=1e-9)
    assert visual.jobs == visual.estimated > 0
    assert math.isclose(visual.seconds, _walls(pilot, "cache_visual"), rel_tol=1e-9)
    assert math.isclose(generate.bytes, _bytes(pilot, "generate/**/samples.parquet"))
    assert math.isclose(same.stages["prepare"].bytes, _bytes(pilot, "prepared/*.parquet"))
    assert same.stages["caption"].jobs == len(list(pilot.glob("captions/*/*.parquet"))) > 0

    doubled = mmconfig.merge(cfg, {"datasets": {"toy_caption": {"samples": 6}}})
    twice = plan.plan(doubled, tmp_path / "results", pilot=pilot).stages["generate"]
    timed = sum(plan._timed(p)[0] for p in pilot.glob("generate/**/samples.parquet"))
    outside = _walls(pilot, "generate") - timed
    assert 0 < outside and math.isclose(twice.seconds, outside + 2 * timed, rel_tol=1e-6)

    text = plan.render(same, 8)
    assert (
        f"per stage, the jobs to run (device-hours and disk from the earlier jobs in {pilot})"
        in text
    )
    time = stage_costs.device_time(generate.seconds)
    assert f"  generate: {n} cells, {time}, disk at most" in text
    assert "  cache_visual: " in text and "at most" in text  # loading counted in each row
    finished = plan.render(plan.plan(cfg, pilot), 8)
    assert "  generate: nothing to run" in finished and "  all stages: nothing to run" in finished


def test_a_pilot_caps_each_dataset_and_its_run_feeds_plan(tiny_run, tmp_path):
    """`mmspec pilot` writes the partial config capping every dataset the cells read; `mmspec
    plan --pilot` estimates the full sweep from a pilot's results folder."""
    out = subprocess.run(
        ["mmspec", "pilot", str(TINY), "--samples", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert out.startswith("# A pilot of ") and "mmspec plan" in out
    override = yaml.safe_load(out)
    assert override == {"datasets": {"toy_caption": {"samples": 2}}}
    capped = mmconfig.merge(mmconfig.load(TINY), override)
    assert capped["datasets"]["toy_caption"]["samples"] == 2
    planned = subprocess.run(
        [
            "mmspec",
            "plan",
            str(TINY),
            "--results",
            str(tmp_path),
            "--pilot",
            str(tiny_run / "results"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    assert "no earlier run of this pair" not in planned
    assert f"the earlier jobs in {tiny_run / 'results'}" in planned
    line = r"  generate: \d+ cells, \d+\.\d\d device-hours \(.* min\), disk at most"
    assert re.search(line, planned)


def test_the_profile_is_its_folder_or_its_file_and_a_missing_one_is_named(tmp_path):
    assert plan.profile_file(ROOT / "slurm") == ROOT / "slurm" / "config.yaml"
    assert plan.profile_file(ROOT / "slurm" / "config.yaml") == ROOT / "slurm" / "config.yaml"
    with pytest.raises(ValueError, match="no Slurm profile there"):
        plan.profile_file(tmp_path / "nowhere")
