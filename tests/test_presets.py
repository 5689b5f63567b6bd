"""The papers' presets resolve into the expected cells, and Snakemake plans them (dry run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mmspec import config as mmconfig

ROOT = Path(__file__).resolve().parents[1]
TABED = ROOT / "config" / "presets" / "tabed.yaml"
TABED_ROWS = ["m", "t", "c", "p", "mt", "mtc", "mtp", "mtcp", "random_mt", "tabed_mt",
              "tabed_mtcp", "tabed_adaboost"]
DATASETS = ["llava_bench", "docvqa", "pope", "mmvet", "iedit", "magicbrush", "spot_the_diff",
            "pororo", "vist"]


def test_tabed_preset_resolves_into_the_papers_grid():
    cfg = mmconfig.load(TABED)
    cells = mmconfig.cells(cfg)
    main = [c for c in cells if c.pair == "llava15_7b_68m"]
    for dataset in DATASETS:
        for method in TABED_ROWS:
            gammas = {c.spec["gamma"] for c in main if c.dataset == dataset and c.method == method}
            assert gammas == {3, 5, 7}, (dataset, method)
    tabed = next(c for c in main if c.method == "tabed_mt")
    assert tabed.spec["views"] == "MT" and tabed.spec["weights"] == "grid"
    assert next(c for c in main if c.method == "tabed_mtcp").spec["weights"] == "softmax"
    windows = {c.spec["window"] for c in main if c.method == "tabed_mt_window"}
    assert windows == {1, 4, 16}
    assert all(c.spec["temperature"] == 0 for c in cells)
    assert cfg["generation"]["max_new_tokens"] == 128
    assert cfg["captioner"]["model"].endswith("Florence-2-large-ft")
    groups = {name: ds["group"] for name, ds in cfg["datasets"].items()}
    assert {n for n, g in groups.items() if g == "ood"} == {"pororo", "vist"}
    targets = {p["target"] for p in cfg["pairs"].values()}
    drafts = {p["draft"] for p in cfg["pairs"].values()}
    assert targets == {"llava-hf/llava-1.5-7b-hf", "llava-hf/llava-1.5-13b-hf",
                       "llava-hf/llava-v1.6-vicuna-7b-hf"}
    assert drafts == {"mjbooo/lvlm68m", "mjbooo/lvlm160m-bf16", "mjbooo/lvlm68m-ov"}
    others = {c.method for c in cells if c.pair != "llava15_7b_68m"}
    assert others == {"ar", "m", "t", "tabed_mt"}


def test_tabed_preset_dry_run_plans_every_cell(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--dry-run",
           "--cores", "4", "--directory", str(tmp_path), "--configfile", str(TABED)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    table = (out.stdout + out.stderr).split("Job stats:")[1]
    jobs = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    n_cells = len(mmconfig.cells(mmconfig.load(TABED)))
    assert jobs["generate"] == jobs["score"] == n_cells
    assert jobs["prepare"] == len(DATASETS)
    assert jobs["caption"] == len(DATASETS)  # one Florence-2 pass per dataset
    assert jobs["cache_visual"] == len(DATASETS) * 6  # 3 targets + 3 drafts
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
