"""A searched method entry through the workflow: rounds as checkpoints, a killed search resumed
to the same cells, a larger budget that reruns no finished cell, and points shared with a grid."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from workflow_cli import ROOT, job_counts, snakemake_cmd

from mmspec.claims import scorecard
from mmspec.claims.checks import NOT_APPLICABLE
from mmspec.claims.claim import Claim, parse_check

SEARCH_ID = "dataset=toy_caption/pair=toy/method=s"


def sweep(budget: int) -> dict:
    """Six points (gamma 1-3 x views M, T); the grid `sd` holds the three over view M."""
    return {
        "seeds": [0],
        "generation": {"max_new_tokens": 8},
        "timing": {"warmup_samples": 0, "threads": 1},
        "toy": {
            "models": {
                "target": {"hidden": 32, "layers": 1, "heads": 2, "steps": 2, "batch_size": 4},
                "draft": {"hidden": 16, "layers": 1, "heads": 2, "steps": 2, "batch_size": 4},
                "captioner": {"hidden": 16, "layers": 1, "heads": 2, "steps": 2, "batch_size": 4},
            }
        },
        "captioner": {"model": "toy:captioner", "prompt": "describe the image .",
                      "max_new_tokens": 4},
        "datasets": {"toy_caption": {"source": "toy", "samples": 2}},
        "pairs": {"toy": {"target": "toy:target", "draft": "toy:draft"}},
        "methods": {
            "ar": {},
            "sd": {"gamma": [1, 2, 3], "views": "M"},
            "s": {
                "method": "sd",
                "gamma": {"low": 1, "high": 3},
                "views": ["M", "T"],
                "search": {"budget": budget, "per_round": 2, "seed": 3},
            },
        },
    }  # fmt: skip


def round_file(workdir: Path, number: int) -> Path:
    return workdir / "results" / "search" / SEARCH_ID / f"round-{number}.json"


def points(workdir: Path, number: int) -> list[dict]:
    return json.loads(round_file(workdir, number).read_text())["points"]


def test_search_rounds_resume_grow_and_share_cells(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    config = tmp_path / "search4.yaml"
    config.write_text(yaml.safe_dump(sweep(4)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = snakemake_cmd(workdir, config)

    # killed once round 2 is proposed, before its cells are all decoded
    run = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 600
    while not round_file(workdir, 2).exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    assert round_file(workdir, 2).exists()
    proposed = [points(workdir, 1), points(workdir, 2)]
    subprocess.run(
        [*snakemake_cmd(workdir, config, "--unlock")], cwd=ROOT, env=env, capture_output=True
    )

    # resumed: the same rounds (a round job killed before Snakemake recorded it runs again, and
    # proposes the same points from the same history), their cells decoded
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [points(workdir, 1), points(workdir, 2)] == proposed
    chosen = [p for round_points in proposed for p in round_points]
    assert len({json.dumps(p, sort_keys=True) for p in chosen}) == 4

    # each point is one cell; those over view M are the grid's (decoded once, as `sd`)
    cells = pq.read_table(workdir / "results" / "summary" / "cells.parquet").to_pylist()
    searched = {(c["method"], c["hp"]) for c in cells if c["method"] == "s"}
    expected = {("s", f"gamma-{p['gamma']}_views-T") for p in chosen if p["views"] == "T"}
    assert searched == expected
    assert {c["hp"] for c in cells if c["method"] == "sd"} == {
        f"gamma-{g}_views-M" for g in (1, 2, 3)
    }
    generated = workdir / "results" / "generate" / "dataset=toy_caption" / "pair=toy"
    assert not list((generated / "method=s").glob("hp=*views-M"))
    before = {p: p.stat().st_mtime_ns for p in generated.rglob("samples.parquet")}

    # a larger budget: only round 3 is new, and it proposes the space's last two points
    larger = tmp_path / "search6.yaml"
    larger.write_text(yaml.safe_dump(sweep(6)))
    dry = subprocess.run(
        snakemake_cmd(workdir, larger, "-n"), cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = job_counts(dry.stdout + dry.stderr)
    assert jobs.get("search_round") == 1 and "generate" not in jobs and "score" not in jobs
    out = subprocess.run(
        snakemake_cmd(workdir, larger), cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert [points(workdir, 1), points(workdir, 2)] == proposed
    everything = chosen + points(workdir, 3)
    assert sorted(json.dumps(p, sort_keys=True) for p in everything) == sorted(
        json.dumps({"gamma": g, "views": v}, sort_keys=True) for g in (1, 2, 3) for v in "MT"
    )
    for path, mtime in before.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was decoded again"

    # a claim reads the searched cells as it reads a grid's: tau along gamma over view T, where
    # every cell is the search's
    cells = pq.read_table(workdir / "results" / "summary" / "cells.parquet").to_pandas()
    claim = Claim(
        paper="P", id="t", claim="tau rises with gamma", where="Table 1", paper_numbers="",
        check=parse_check(
            {"kind": "trend", "stat": "tau", "along": "gamma",
             "a": {"registry_method": "sd", "views": "T"}}, "test",
        ),
    )  # fmt: skip
    (row,) = scorecard.evaluate([claim], {"run": cells}).to_dict("records")
    assert row["verdict"] != NOT_APPLICABLE, row["measured"]
    assert re.findall(r"(\d+): tau", row["measured"]) == ["1", "2", "3"], row["measured"]
