"""The workflow end to end on a tiny image-generation sweep: guided generation of code grids,
FID and CLIP scoring, the lossless checks, thumbnails and the report's image section."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from workflow_cli import snakemake_cmd

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "configs" / "tiny_images.yaml"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("images")
    out = subprocess.run(snakemake_cmd(workdir, CONFIG), capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    return workdir


def _cells(run_dir: Path) -> dict:
    rows = pq.read_table(run_dir / "results/summary/cells.parquet").to_pylist()
    return {(r["method"], json.loads(r["hparams"]).get("lantern_delta")): r for r in rows}


def test_lossless_cells_draw_the_ar_images(run_dir):
    cells = _cells(run_dir)
    ar = cells[("ar", None)]
    assert ar["fid"] is not None and ar["fid"] == ar["ar_fid"] and ar["fid_retention"] == 1.0
    assert ar["fid_retention_low"] == ar["fid_retention_high"] == pytest.approx(1.0)
    # greedy SD and LANTERN at delta 0 are lossless: the same codes, so the same images and FID
    for key in [("sd_chain", None), ("lantern", 0.0), ("eagle_image", None)]:
        cell = cells[key]
        assert cell["lossless_rule"] and cell["lossless_rate"] == 1.0, key
        assert cell["fid"] == ar["fid"] and cell["quality"] == ar["quality"], key
        assert cell["tau"] > 1.0
        assert not cell["relaxed_share"], key  # nothing accepted beyond the lossless rule


def test_relaxed_cells_are_lossy_not_failed(run_dir):
    cells = _cells(run_dir)
    for key in [("lantern", 0.3), ("lantern_tree", 0.1), ("lantern_eagle", 0.3)]:
        cell = cells[key]
        assert cell["lossless_rule"] is False and cell["lossless_rate"] is None, key
        assert cell["fid"] is not None and cell["quality"] is not None, key
        assert cell["fid_retention"] == pytest.approx(cell["ar_fid"] / cell["fid"])
        # intervals over the prompts (paired with AR's images) bracket both
        assert cell["fid_low"] <= cell["fid"] <= cell["fid_high"], key
        low, high = cell["fid_retention_low"], cell["fid_retention_high"]
        assert low <= cell["fid_retention"] <= high, key
        assert 0 <= cell["relaxed_share"] < 1, key  # counted (these tiny drafts rarely miss)


def test_outputs_are_full_code_grids_with_thumbnails(run_dir):
    samples = pq.read_table(
        next((run_dir / "results/generate").glob("**/method=lantern_tree/**/samples.parquet"))
    ).to_pylist()
    assert all(len(s["output_ids"]) == 64 for s in samples)  # the 8 x 8 grid of 4-px patches
    assert all(s["target_visual_tokens"] == 0 for s in samples)
    assert not (run_dir / "results/visual").exists()  # caption prompts: no visual cache
    for cell in _cells(run_dir).values():
        images = [np.asarray(Image.open(io.BytesIO(png))) for png in cell["thumbnails"]]
        assert len(images) == 4 and all(i.shape == (32, 32, 3) for i in images)


def test_one_eagle_head_trains_on_the_targets_draws_of_the_training_split(run_dir):
    heads = list((run_dir / "results/drafters/toy_image/eagle").iterdir())
    assert len(heads) == 1  # exact and relaxed verification share the head
    record = json.loads((heads[0] / "training.json").read_text())
    # two draws per caption (greedy, sampled), each behind the conditional and unconditional
    # prompt
    assert record["sequences"] == 6 * 4 and record["target"] == "toy:image_target"
    assert not (run_dir / "results/visual").exists()  # nor does the head read a visual cache


def test_report_has_the_image_section(run_dir):
    html = (run_dir / "reports/index.html").read_text()
    assert "id='image-generation'" in html or 'id="image-generation"' in html
    assert html.count("alt='generated image") == 4 * 7  # four thumbnails of each cell
    assert "fid_retention" in html
