"""Rehearsing a cluster sweep on a laptop: a paper's preset, its pairs pointed at tiny random
models of the same families and its HF datasets at stand-ins, resolves every cell and runs
prepare -> cache_visual -> generate -> score -> report through the real workflow, offline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import cell_job_counts, snakemake_cmd

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.toy import stand_in, tiny

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "config" / "presets"
# each preset's pairs -> the families of their (target, draft) models
OV, QWEN = ("llava_onevision", "llava_onevision"), ("qwen2_5_vl", "qwen2_5_vl")
FAMILIES = {
    "sage": {"llava_ov_72b_7b": OV, "qwen25vl_72b_7b": QWEN},
    "specvlm": {"llava_ov_72b_7b": OV, "qwen25vl_72b_7b": QWEN, "qwen25vl_32b_7b": QWEN},
    "tabed": {
        "llava15_7b_68m": ("llava", "llava"),
        # TABED's drafts are LLaVA-1.5 style
        "llava16_7b_68m": ("llava_next", "llava"),
        "llava16_7b_160m": ("llava_next", "llava"),
        "llava16_7b_68m_ov": ("llava_next", "llava"),
        "llava16_13b_68m": ("llava_next", "llava"),
    },
}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("stand_ins")
    models = {}
    for family in {f for pairs in FAMILIES.values() for both in pairs.values() for f in both}:
        models[family] = (
            tiny.save(family, root / family, seed=0),
            tiny.save(family, root / f"{family}_draft", layers=1, seed=1),
        )
    return root, models


def _overrides(preset: str, root: Path, models: dict) -> list[str]:
    cfg = mmconfig.load(PRESETS / f"{preset}.yaml")
    assert set(cfg["pairs"]) == set(FAMILIES[preset]), "a preset pair without a stand-in family"
    pairs = {
        name: {"target": str(models[target][0]), "draft": str(models[draft][1]), "dtype": "float32"}
        for name, (target, draft) in FAMILIES[preset].items()
    }
    datasets = stand_in.write_all(cfg, root / preset, rows=2)
    return [f"pairs={json.dumps(pairs)}", stand_in.as_cli(datasets)]


def _snakemake(workdir: Path, preset: str, overrides: list[str], *extra: str):
    cmd = snakemake_cmd(workdir, PRESETS / f"{preset}.yaml", "--config", *overrides, *extra)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("preset", sorted(FAMILIES))
def test_every_preset_resolves_on_stand_ins(preset, stand_ins, tmp_path):
    root, models = stand_ins
    out = _snakemake(tmp_path, preset, _overrides(preset, root, models), "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = cell_job_counts(out.stdout + out.stderr, tmp_path, PRESETS / f"{preset}.yaml")
    cells = mmcells.cells(mmconfig.load(PRESETS / f"{preset}.yaml"))
    assert jobs["generate"] == len(cells)


def test_a_preset_runs_end_to_end_on_stand_ins(stand_ins, tmp_path):
    """SAGE's preset on an image and a video benchmark, both pairs, four methods: every cell
    decodes its stand-in samples losslessly (the stand-ins are random: only exactness counts)."""
    root, models = stand_ins
    sweep = [
        {
            "datasets": ["textvqa", "video_detail_caption"],
            "pairs": ["llava_ov_72b_7b", "qwen25vl_72b_7b"],
            "methods": ["ar", "sd_chain", "specvlm_image", "specvlm"],
        }
    ]
    # random stand-ins never stop early, and their timings mean nothing: 24 new tokens rather
    # than the preset's 256 and no warm-up decodes keep the run to plumbing and exactness
    quick = ['generation={"max_new_tokens": 24}', 'timing={"warmup_samples": 0}']
    sweep_override = "sweep=" + yaml.safe_dump(sweep).strip()
    overrides = [*_overrides("sage", root, models), sweep_override, *quick]
    out = _snakemake(tmp_path, "sage", overrides)
    assert out.returncode == 0, out.stderr[-3000:]
    cells = pq.read_table(tmp_path / "results" / "summary" / "cells.parquet").to_pylist()
    assert len(cells) == 2 * 2 * 4
    assert all(c["n_samples"] == 2 and c["lossless_rate"] == 1.0 for c in cells)
    assert (tmp_path / "reports" / "index.html").exists()
    # the video benchmark went through OneVision's own video path: per video, its frames
    # pooled to 2x2 each plus one newline token (the tiny model's 4x4 patch grid)
    frames = mmconfig.load(PRESETS / "sage.yaml")["datasets"]["video_detail_caption"]
    frames = frames["video"]["frames"]
    samples = tmp_path / "results/generate/dataset=video_detail_caption/pair=llava_ov_72b_7b"
    rows = pq.read_table(next(samples.glob("method=ar/*/*/samples.parquet"))).to_pylist()
    assert [r["target_visual_tokens"] for r in rows] == [frames * 4 + 1] * 2
