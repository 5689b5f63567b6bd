"""Trained drafter heads through the workflow: stage train_drafter, head cells, reruns."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from workflow_cli import cell_job_counts, snakemake_cmd

ROOT = Path(__file__).resolve().parents[1]
HEADS = ROOT / "tests" / "configs" / "tiny_heads.yaml"


def snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_cmd(workdir, config, *args), capture_output=True, text=True, cwd=ROOT
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("heads")
    out = snakemake(workdir, HEADS)
    assert out.returncode == 0, out.stderr[-3000:]
    return workdir


def test_heads_are_trained_once_per_training_setting(run_dir):
    heads = sorted(p.parent for p in (run_dir / "results/drafters").rglob("config.json"))
    # eagle_chain and eagle2 share a head (same training hyperparameters); eagle_long has its own
    assert len(heads) == 2
    for head in heads:
        config = json.loads((head / "config.json").read_text())
        assert config["target"] == "toy:target" and config["kind"] == "eagle"
        curve = pq.read_table(head / "curves.parquet").to_pylist()
        assert curve and curve[-1]["step"] == config["training"]["head_steps"]
        assert 0 <= curve[-1]["heldout_top1"] <= 1
        assert not head.with_name(head.name + ".partial").exists()


def test_head_cells_are_lossless(run_dir):
    cells = pq.read_table(run_dir / "results/summary/cells.parquet").to_pylist()
    assert {c["method"] for c in cells} == {"ar", "eagle_chain", "eagle2", "eagle_long"}
    for c in cells:
        assert c["lossless_rule"] and c["lossless_rate"] == 1.0, c
        assert c["n_samples"] == 3 and c["tau"] >= 1.0
    trees = {c["method"]: c["tree"] for c in cells}
    assert trees["eagle2"] == "dynamic" and trees["eagle_chain"] == "chain"


def test_report_shows_each_heads_training(run_dir):
    html = (run_dir / "reports/index.html").read_text()
    assert "Trained drafters (DREAM" in html and "held-out top-1 agreement" in html
    assert "T=0 · toy_caption · τ" in html  # DREAM's Table 1 layout
    assert html.count("toy/eagle/head_batch_size-4") == 2  # one table row per head


def test_changing_one_training_setting_retrains_only_that_head(run_dir, tmp_path):
    assert "Nothing to be done" in snakemake(run_dir, HEADS, "--dry-run").stdout
    cfg = yaml.safe_load(HEADS.read_text())
    cfg["methods"]["eagle_long"]["head_lr"] = 0.02
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = snakemake(run_dir, config, "--dry-run")
    assert out.returncode == 0, out.stderr
    plan = cell_job_counts(out.stdout + out.stderr, run_dir, config)
    # the changed head, its one cell, and the summary (the report reads the heads' curves)
    assert plan == {
        "train_drafter": 1,
        "generate": 1,
        "score": 1,
        "aggregate": 1,
        "claims": 1,
        "report": 1,
        "all": 1,
    }


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m["eagle2"].pop("head_data"), "name the dataset"),
        (lambda m: m["eagle2"].update(head_data="nope"), "head_data 'nope' names no dataset"),
        (lambda m: m["eagle2"].update(head_lr=-1.0), "head_lr must be > 0"),
        (
            lambda m: m.update(k={"method": "kangaroo", "head_data": "toy_caption_train"}),
            "kangaroo_layers=2 must be below the 1 layers of target 'toy:target'",
        ),
    ],
)
def test_bad_head_settings_fail_before_any_job(tmp_path, change, message):
    cfg = yaml.safe_load(HEADS.read_text())
    change(cfg["methods"])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = snakemake(tmp_path / "work", config, "--dry-run")
    assert out.returncode != 0 and message in out.stdout + out.stderr


@pytest.mark.parametrize(
    "method, message",
    [
        # EAGLE's head drafts images too, but learns them from images, not from captions' text
        ("eagle2", "head_data 'toy_caption_train' must be a dataset of the cell's own task"),
        ("dream", "a dream head drafts text, and dataset 'toy_imagegen' .* generates images"),
    ],
)
def test_a_text_head_over_an_image_generator_is_refused(method, message):
    from mmspec.sweep import config as mmconfig

    cfg = mmconfig.load_as_snakemake("config/config.yaml")
    cfg["sweep"] = [{"datasets": ["toy_imagegen"], "pairs": ["toy_image"], "methods": [method]}]
    with pytest.raises(mmconfig.ConfigError, match=message):
        mmconfig.validate(cfg)


def test_a_killed_training_job_resumes_from_its_checkpoint(run_dir, tmp_path):
    """`mmspec train_drafter` killed (SIGKILL) after its first checkpoint resumes from it and
    ends with the weights of an uninterrupted run."""
    import os
    import signal
    import time

    from safetensors.torch import load_file

    from mmspec.sweep import cells as mmcells
    from mmspec.sweep import config as mmconfig

    cfg = mmconfig.validate(mmconfig.load_as_snakemake(HEADS))
    cell = next(c for c in mmcells.cells(cfg) if c.method == "eagle_long")
    training = {**cell.spec.head_training(), "head_steps": 400}
    params = {
        "pair": cfg["pairs"]["toy"],
        "kind": "eagle",
        "training": training,
        # the config's section but its temperature (a method spec's, which a job holds once)
        "generation": {k: v for k, v in cfg["generation"].items() if k != "temperature"},
        "seed": 0,
    }
    inputs = [
        "--prepared",
        str(run_dir / "results/prepared/toy_caption_train.parquet"),
        "--target-visual",
        str(run_dir / "results/visual/toy-target/toy_caption_train.parquet"),
    ]

    def command(out):
        return ["mmspec", "train_drafter", "--params", json.dumps(params), *inputs, "--out", out]

    whole = tmp_path / "whole"
    done = subprocess.run(command(str(whole)), cwd=run_dir, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]

    cut = tmp_path / "cut"
    state = tmp_path / "cut.partial" / "state.pt"
    job = subprocess.Popen(command(str(cut)), cwd=run_dir, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not state.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.poll() is None, "the job ended before its first checkpoint"
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert not cut.exists() and state.exists()
    resumed = subprocess.run(command(str(cut)), cwd=run_dir, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "train_drafter:" in resumed.stderr and not state.parent.exists()
    a, b = load_file(whole / "model.safetensors"), load_file(cut / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
