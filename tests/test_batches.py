"""Cell batches (mmspec.workflow.batches, `mmspec batch`): the jobs of the per-cell stages.

A batch runs each cell as its own command would, reruns a cell exactly when its job, code or
inputs changed or its output is gone, and a damaged batch record makes the workflow rerun it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmspec.sweep import cell_keys
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep.config_checks import dataset_task
from mmspec.sweep.jobs import GenerateJob
from mmspec.workflow import batches

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "config" / "config.yaml"


def _sweep(seeds: list[int]) -> tuple[dict, list]:
    cfg = mmconfig.merge(mmconfig.load(TOUR), {"seeds": seeds})
    cfg["methods"]["sd_grid"] = {
        "method": "sd",
        "views": "U",
        "gamma": [1, 2, 3],
        "keep": [0.2, 0.6],
    }
    cfg["sweep"].append(
        {"datasets": ["toy_caption", "toy_video"], "pairs": ["toy_vdraft"], "methods": ["sd_grid"]}
    )
    cfg = mmconfig.validate(cfg)
    return cfg, list(mmcells.cells(cfg))


def test_each_cells_job_is_what_its_own_command_would_be():
    """The jobs a grid point's seeds share are built once: each cell's still equals its own."""
    cfg, cells = _sweep([0, 3, 7])
    planned = batches.of_sweep(cfg, cells)
    jobs = {j.cell: j for b in planned["generate"].values() for j in b.jobs}
    ar_of = batches.ar_finder(cfg, cells)
    assert len(jobs) == len(cells)
    for cell in cells:
        job = jobs[cell.path]
        own = GenerateJob.of_cell(cfg, cell, dataset_task(cfg, cell.dataset)).to_json()
        argv = list(job.argv)
        assert argv[argv.index("--params") + 1] == own
        assert argv[argv.index("--out") + 1] == f"results/generate/{cell.path}/samples.parquet"
        if cell.spec.method == "ar":
            assert "--ar-samples" not in argv
        else:
            ar = f"results/generate/{ar_of(cell).path}/samples.parquet"
            assert argv[argv.index("--ar-samples") + 1] == ar and ar in job.inputs
        assert json.loads(own)["cell"]["seed"] == cell.seed


def test_batches_hold_one_dataset_pair_method_and_seed_in_grid_order():
    cfg, cells = _sweep([0, 1])
    of = batches.partition(cells, 4)
    by_batch: dict[str, list] = {}
    for cell in cells:
        by_batch.setdefault(of[cell.path], []).append(cell)
    for bid, members in by_batch.items():
        assert len(members) <= 4
        assert len({(c.dataset, c.pair, c.method, c.seed) for c in members}) == 1
        assert bid.startswith(f"dataset={members[0].dataset}/pair={members[0].pair}/")
    grid = [
        c for c in cells if c.method == "sd_grid" and c.dataset == "toy_caption" and c.seed == 0
    ]
    assert len(grid) == 6  # 3 gammas x 2 keeps: parts of 4 and 2, in the grid's order
    assert [of[c.path][-6:] for c in grid] == ["part-0"] * 4 + ["part-1"] * 2


def _batch(tmp_path: Path, names: list[str], samples: int = 2) -> tuple[Path, list]:
    """A batch of cheap real cells: `mmspec prepare` of toy datasets."""
    jobs = [
        cell_keys.CellJob(
            cell=name,
            argv=(
                "prepare",
                "--name",
                "toy_caption",
                "--spec",
                json.dumps({"source": "toy", "samples": samples}),
                "--out",
                f"results/prepared/{name}.parquet",
            ),
            out=f"results/prepared/{name}.parquet",
            log=f"logs/{name}.log",
            benchmark=f"results/benchmarks/{name}.tsv",
            inputs=("input.txt",),
            code="c0",
        )  # fmt: skip
        for name in names
    ]
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"stage": "prepare", "batch": "b", "cells": [vars(j) for j in jobs]})
    )
    (tmp_path / "input.txt").write_text("v1")
    return spec, jobs


def _run(tmp_path: Path, spec: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mmspec", "batch", "--spec", str(spec), "--out", "done.json"]
    env = {**os.environ, "MMSPEC_WORKER": "0"}
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env)


def _ran(out: subprocess.CompletedProcess) -> list[str]:
    return sorted(line.split()[1][:-1] for line in out.stderr.splitlines() if ": ran in " in line)


def test_a_batch_reruns_exactly_the_cells_whose_job_inputs_or_output_changed(tmp_path):
    spec, jobs = _batch(tmp_path, ["a", "b", "c"])
    out = _run(tmp_path, spec)
    assert out.returncode == 0, out.stderr
    assert _ran(out) == ["a", "b", "c"]
    record = json.loads((tmp_path / "done.json").read_text())["outputs"]
    assert sorted(record) == [j.out for j in jobs]
    bench = (tmp_path / "results/benchmarks/a.tsv").read_text().splitlines()
    assert bench[0].split("\t")[0] == "s" and float(bench[1].split("\t")[0]) > 0

    # nothing changed: nothing runs
    out = _run(tmp_path, spec)
    assert out.returncode == 0 and _ran(out) == [], out.stderr
    assert "0 cells run, 3 up to date" in out.stderr

    # one output deleted, another cut: those two, not the third
    (tmp_path / jobs[0].out).unlink()
    data = (tmp_path / jobs[1].out).read_bytes()
    (tmp_path / jobs[1].out).write_bytes(data[: len(data) // 2])
    out = _run(tmp_path, spec)
    assert out.returncode == 0 and _ran(out) == ["a", "b"], out.stderr

    # one cell's job changed (its code fingerprint): that cell only
    changed = [vars(j) for j in jobs]
    changed[2] = {**changed[2], "code": "c1"}
    spec.write_text(json.dumps({"stage": "prepare", "batch": "b", "cells": changed}))
    out = _run(tmp_path, spec)
    assert out.returncode == 0 and _ran(out) == ["c"], out.stderr

    # an input rewritten: every cell reading it
    (tmp_path / "input.txt").write_text("v2")
    out = _run(tmp_path, spec)
    assert out.returncode == 0 and _ran(out) == ["a", "b", "c"], out.stderr


def test_a_failing_cell_fails_the_batch_after_the_others_ran(tmp_path):
    spec, jobs = _batch(tmp_path, ["a", "b", "c"])
    cells = [vars(j) for j in jobs]
    bad = list(cells[1]["argv"])
    bad[bad.index("--spec") + 1] = json.dumps({"source": "toy", "samples": "many"})
    cells[1] = {**cells[1], "argv": bad}
    spec.write_text(json.dumps({"stage": "prepare", "batch": "b", "cells": cells}))
    out = _run(tmp_path, spec)
    assert out.returncode == 1
    assert _ran(out) == ["a", "c"]
    assert "[2/3] b: failed (exit 1" in out.stderr and "log logs/b.log" in out.stderr
    assert "mmspec prepare: error:" in out.stderr  # the tail of its log, on the job's log
    assert "1 of 3 prepare cells failed" in out.stderr
    assert not (tmp_path / "done.json").exists()
    # fixed: the failed cell runs, the others are up to date
    spec.write_text(
        json.dumps({"stage": "prepare", "batch": "b", "cells": [vars(j) for j in jobs]})
    )
    out = _run(tmp_path, spec)
    assert out.returncode == 0 and _ran(out) == ["b"], out.stderr


def test_a_record_whose_outputs_changed_is_removed_so_its_batch_reruns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg, cells = _sweep([0])
    planned = batches.of_sweep(cfg, cells)
    first = next(iter(planned["score"].values()))
    for job in first.jobs:
        Path(job.out).parent.mkdir(parents=True, exist_ok=True)
        Path(job.out).write_bytes(b"PAR1 then footer PAR1")
    Path(first.record).parent.mkdir(parents=True, exist_ok=True)
    cell_keys.write_record(first.record, first.jobs)
    assert batches.stale_records(planned) == []
    assert Path(first.record).exists()
    os.utime(first.jobs[0].out, ns=(1, 1))  # the same bytes, another time: replaced
    lines = batches.stale_records(planned)
    assert lines == [
        f"mmspec: {first.jobs[0].out}: changed since its job wrote it (size or time); its score "
        "job runs again, for the cells not up to date"
    ]
    assert not Path(first.record).exists()
    cell_keys.write_record(first.record, first.jobs)
    Path(first.jobs[0].out).unlink()
    assert "missing" in batches.stale_records(planned)[0]


@pytest.mark.parametrize("size", [1, 16])
def test_batch_cells_is_scheduling_only(size, tmp_path):
    """The cells' jobs, hence their outputs and keys, do not depend on the batch size."""
    cfg, cells = _sweep([0])
    other = mmconfig.validate({**yaml.safe_load(yaml.safe_dump(cfg)), "batch_cells": size})
    jobs = {j.cell: j for b in batches.of_sweep(cfg, cells)["generate"].values() for j in b.jobs}
    resized = batches.of_sweep(other, mmcells.cells(other))["generate"]
    assert all(len(b.jobs) <= size for b in resized.values())
    for b in resized.values():
        for job in b.jobs:
            assert job == jobs[job.cell]
