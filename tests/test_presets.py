"""The papers' presets resolve into the expected cells, and Snakemake plans them (dry run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from workflow_cli import cell_job_counts, snakemake_cmd

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep import config_checks

ROOT = Path(__file__).resolve().parents[1]
TABED = ROOT / "config" / "presets" / "tabed.yaml"
TABED_ROWS = [
    "m",
    "t",
    "c",
    "p",
    "mt",
    "mtc",
    "mtp",
    "mtcp",
    "random_mt",
    "tabed_mt",
    "tabed_mtcp",
    "tabed_adaboost",
]
DATASETS = [
    "llava_bench",
    "docvqa",
    "pope",
    "mmvet",
    "iedit",
    "magicbrush",
    "spot_the_diff",
    "pororo",
    "vist",
]


def test_tabed_preset_resolves_into_the_papers_grid():
    cfg = mmconfig.load(TABED)
    cells = mmcells.cells(cfg)
    main = [c for c in cells if c.pair == "llava15_7b_68m"]
    for dataset in DATASETS:
        for method in TABED_ROWS:
            gammas = {c.spec.gamma for c in main if c.dataset == dataset and c.method == method}
            assert gammas == {3, 5, 7}, (dataset, method)
    tabed = next(c for c in main if c.method == "tabed_mt")
    assert tabed.spec.views == "MT" and tabed.spec.weights == "grid"
    assert next(c for c in main if c.method == "tabed_mtcp").spec.weights == "softmax"
    windows = {c.spec.params["window"] for c in main if c.method == "tabed_mt_window"}
    assert windows == {1, 4, 16}
    assert all(c.spec.temperature == 0 for c in cells)
    assert cfg["generation"]["max_new_tokens"] == 128
    assert cfg["captioner"]["model"].endswith("Florence-2-large-ft")
    groups = {name: ds["group"] for name, ds in cfg["datasets"].items()}
    assert {n for n, g in groups.items() if g == "ood"} == {"pororo", "vist"}
    targets = {p["target"] for p in cfg["pairs"].values()}
    drafts = {p["draft"] for p in cfg["pairs"].values()}
    assert targets == {
        "llava-hf/llava-1.5-7b-hf",
        "llava-hf/llava-v1.6-vicuna-7b-hf",  # Appendix A's Tables 19-22
        "llava-hf/llava-v1.6-vicuna-13b-hf",
    }
    assert drafts == {"mjbooo/lvlm68m", "mjbooo/lvlm160m-bf16", "mjbooo/lvlm68m-ov"}
    others = {c.method for c in cells if c.pair != "llava15_7b_68m"}
    assert others == {"ar", "m", "t", "tabed_mt"}


def test_tabed_preset_dry_run_plans_every_cell(tmp_path):
    jobs = _dry_run_jobs(TABED, tmp_path)
    n_cells = len(mmcells.cells(mmconfig.load(TABED)))
    assert jobs["generate"] == jobs["score"] == n_cells
    # the benchmark datasets, and the multi-turn stand-in (llava_multiturn: the views of Tables
    # 1, 3 and 4 on the main pair only, so two visual caches)
    assert jobs["prepare"] == len(DATASETS) + 1
    assert jobs["caption"] == len(DATASETS) + 1  # one Florence-2 pass per dataset
    assert jobs["cache_visual"] == len(DATASETS) * 6 + 2  # 3 targets + 3 drafts
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


SAGE = ROOT / "config" / "presets" / "sage.yaml"
SPECVLM = ROOT / "config" / "presets" / "specvlm.yaml"
LLAVA_OV = ("llava-hf/llava-onevision-qwen2-72b-ov-hf", "llava-hf/llava-onevision-qwen2-7b-ov-hf")
SAGE_IMAGE = ["textvqa", "gqa", "chartqa", "seed_bench"]
SAGE_VIDEO = ["video_detail_caption", "mvbench", "mlvu", "longvideobench"]
SAGE_TREE = {
    "sage_d_min": 3,
    "sage_d_max": 8,
    "sage_w_min": 2,
    "sage_w_max": 10,
    "sage_k": 10,
    "sage_n_max": 64,
    "sage_window": 10,
    "sage_low": 2.0,
    "sage_high": 3.0,
}


def _dry_run_jobs(preset, tmp_path):
    """Snakemake's planned job counts per rule for a dry run of `preset` in `tmp_path`."""
    cmd = snakemake_cmd(tmp_path, preset, "--dry-run", cores=4)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return cell_job_counts(out.stdout + out.stderr, tmp_path, preset)


def _visual_caches(cfg, cells):
    """(model, dataset) visual caches the cells read: every pair runs SD with view M, so both the
    target's and the draft's."""
    pairs = cfg["pairs"]
    return {(pairs[c.pair][role], c.dataset) for c in cells for role in ("target", "draft")}


def test_sage_preset_resolves_into_the_papers_grid():
    cfg = mmconfig.load(SAGE)
    cells = mmcells.cells(cfg)
    assert cfg["pairs"]["llava_ov_72b_7b"]["target"] == LLAVA_OV[0]
    assert cfg["pairs"]["llava_ov_72b_7b"]["draft"] == LLAVA_OV[1]
    assert cfg["pairs"]["qwen25vl_72b_7b"]["target"] == "Qwen/Qwen2.5-VL-72B-Instruct"
    assert cfg["pairs"]["qwen25vl_72b_7b"]["draft"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert {p["dtype"] for p in cfg["pairs"].values()} == {"bfloat16"}
    groups = {name: ds["group"] for name, ds in cfg["datasets"].items()}
    assert [n for n, g in groups.items() if g == "image"] == SAGE_IMAGE
    assert [n for n, g in groups.items() if g == "video"] == SAGE_VIDEO
    for name in SAGE_VIDEO:
        assert cfg["datasets"][name]["video"]["frames"] == 16
    rows = {"ar", "sd_chain", "sd_tree", "specvlm", "sage"}
    for dataset in SAGE_IMAGE + SAGE_VIDEO:
        methods = {
            c.spec.method for c in cells if c.pair == "llava_ov_72b_7b" and c.dataset == dataset
        }
        # Table 5's set also runs SAGE's trees over the whole prompt and a chain as deep as
        # their deepest (the scorecard's sage-tree claims)
        extra = {"sage_tree"} if dataset == "video_detail_caption" else set()
        assert methods == rows | extra, dataset
    chains = {
        (c.dataset, c.spec.gamma)
        for c in cells
        if c.spec.method == "sd_chain" and c.pair == "llava_ov_72b_7b"
    }
    assert {g for d, g in chains if d == "video_detail_caption"} == {5, 8}
    assert {g for d, g in chains if d != "video_detail_caption"} == {5}
    qwen = {(c.dataset, c.spec.method) for c in cells if c.pair == "qwen25vl_72b_7b"}
    assert qwen == {
        (d, m) for d in ["video_detail_caption", "mvbench", "longvideobench"] for m in rows
    }  # Table 2
    pruned = [c for c in cells if c.spec.method in ("specvlm", "sage")]
    for cell in pruned:  # 80% of the visual tokens pruned on image tasks, 90% on video tasks
        assert cell.spec.views == "S"
        if cell.method != "sage_drop":
            assert cell.spec.params["drop"] == (0.8 if groups[cell.dataset] == "image" else 0.9), (
                cell.path
            )
    ablation = [c for c in pruned if c.method == "sage_drop"]
    assert {c.spec.params["drop"] for c in ablation} == {0.0, 0.3, 0.6, 0.7, 0.8, 0.95}  # Table 5
    assert {(c.dataset, c.pair) for c in ablation} == {("video_detail_caption", "llava_ov_72b_7b")}
    for cell in (c for c in cells if c.spec.method == "sage"):
        assert cell.spec.tree == "sage"
        assert {k: cell.spec.params[k] for k in SAGE_TREE} == SAGE_TREE
    assert all(
        len(c.spec.params["paths"]) == 25 for c in cells if c.spec.method in ("sd_tree", "specvlm")
    )
    assert {c.spec.tree for c in cells if c.spec.method == "sd_chain"} == {"chain"}
    assert all(c.spec.temperature == 0 for c in cells)
    assert cfg["generation"]["max_new_tokens"] == 256
    assert "captioner" not in cfg


@pytest.mark.parametrize(
    "preset, n_datasets",
    # SpecVLM: its 7B Qwen draft is shared by two pairs, so fewer visual caches than pairs x 2
    [(SAGE, len(SAGE_IMAGE + SAGE_VIDEO)), (SPECVLM, 5)],
    ids=["sage", "specvlm"],
)
def test_video_preset_dry_run_plans_every_cell(preset, n_datasets, tmp_path):
    jobs = _dry_run_jobs(preset, tmp_path)
    cfg = mmconfig.load(preset)
    cells = mmcells.cells(cfg)
    assert jobs["generate"] == jobs["score"] == len(cells)
    assert jobs["prepare"] == n_datasets
    assert "caption" not in jobs  # no method drafts from captions
    assert jobs["cache_visual"] == len(_visual_caches(cfg, cells))
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


def test_specvlm_preset_resolves_into_its_setup():
    cfg = mmconfig.load(SPECVLM)
    cells = mmcells.cells(cfg)
    assert {(p["target"], p["draft"]) for p in cfg["pairs"].values()} == {
        LLAVA_OV,
        ("Qwen/Qwen2.5-VL-32B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"),
        ("Qwen/Qwen2.5-VL-72B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"),
    }
    assert {p["dtype"] for p in cfg["pairs"].values()} == {"float16"}
    datasets = ["video_detail_caption", "mvbench", "mlvu", "longvideobench", "mmbench"]
    assert list(cfg["datasets"]) == datasets
    assert cfg["datasets"]["mmbench"]["group"] == "image"
    for pair in cfg["pairs"]:
        for dataset in datasets:
            methods = {c.method for c in cells if c.pair == pair and c.dataset == dataset}
            expected = {"ar", "sd_tree", "specvlm"}
            if (pair, dataset) == ("llava_ov_72b_7b", "video_detail_caption"):
                expected.add("specvlm_drop")
            assert methods == expected, (pair, dataset)
    main = [c for c in cells if c.method == "specvlm"]
    assert {(c.spec.params["drop"], c.spec.params["mass"], c.spec.views) for c in main} == {
        (0.9, 0.4, "S")
    }
    sd_tree = next(c for c in cells if c.method == "sd_tree")
    assert (
        sd_tree.spec.views == "M" and sd_tree.spec.params["paths"] == main[0].spec.params["paths"]
    )
    assert len(sd_tree.spec.params["paths"]) == 25  # the same EAGLE tree as SpecVLM
    ablation = {c.spec.params["drop"] for c in cells if c.method == "specvlm_drop"}
    assert ablation == {0.5, 0.7, 0.8, 0.95}
    assert all(c.spec.temperature == 0 for c in cells)
    assert cfg["generation"]["max_new_tokens"] == 256
    assert "captioner" not in cfg


LANTERN = ROOT / "config" / "presets" / "lantern.yaml"


def test_lantern_preset_resolves_into_the_papers_grid_and_dry_runs(tmp_path):
    cfg = mmconfig.load(LANTERN)
    assert config_checks.dataset_task(cfg, "coco30k") == "image_generation"
    assert cfg["datasets"]["coco30k"]["limit"] == 30000  # the paper's 30k-sample FID
    assert cfg["generation"]["top_k"] == 1000  # appendix C: LlamaGen's sampling
    cells = mmcells.cells(cfg)
    grid = {
        (c.spec.temperature, c.spec.params["lantern_k"], c.spec.params["lantern_delta"])
        for c in cells
        if c.spec.method == "lantern"
    }
    assert grid == {
        (t, k, d) for t in (0.0, 1.0) for k in (100, 300, 1000) for d in (0.05, 0.1, 0.2, 0.4)
    }
    assert {c.spec.params["proximity"] for c in cells if c.spec.method == "lantern_random"} == {
        "random"
    }
    jobs = _dry_run_jobs(LANTERN, tmp_path)
    assert jobs["generate"] == jobs["score"] == len(cells)
    assert "cache_visual" not in jobs and "toy_model" not in jobs  # caption prompts, real nets
    assert not (tmp_path / "results").exists()


LVSPEC = ROOT / "config" / "presets" / "lvspec.yaml"


def test_lvspec_preset_resolves_into_the_papers_grid_and_dry_runs(tmp_path):
    cfg = mmconfig.load(LVSPEC)
    cells = mmcells.cells(cfg)
    # Std.-SD and Self-SD (the target drafting for itself, loaded once)
    assert cfg["pairs"]["self_qwen25vl_7b"]["draft"] == cfg["pairs"]["self_qwen25vl_7b"]["target"]
    assert {c.pair for c in cells} == {
        "qwen25vl_32b_7b",
        "llava_ov_72b_7b",
        "self_qwen25vl_7b",
        "self_llava_ov_7b",
    }
    # Table 4's frames; K = 10; lambda 0.7 and N 10 with PST in the main rows
    frames = {d: cfg["datasets"][d]["video"]["frames"] for d in cfg["datasets"]}
    assert frames == {"vdc": 64, "vdd": 128, "moviechat": 128, "videomme": 64}
    main = [c.spec.params for c in cells if c.method == "lvspec"]
    assert {(s["lvspec_lambda"], s["lvspec_n"], s["pst"], s["gamma"]) for s in main} == {
        (0.7, 10, True, 10)
    }
    lambdas = {c.spec.params["lvspec_lambda"] for c in cells if c.method == "lvspec_lambda"}
    assert lambdas == {0.0, 0.2, 0.5, 0.7, 0.9}  # Table 3's lambdas
    ns = {c.spec.params["lvspec_n"] for c in cells if c.method in ("lvspec_n", "lvspec_lambda")}
    assert {1, 10, 100} <= ns  # Table 3's N
    assert config_checks.judged_datasets(cfg) == ["moviechat", "vdc", "vdd"]
    assert cfg["judge"]["endpoint"].startswith("http") and cfg["judge"]["api_key_env"] is None
    jobs = _dry_run_jobs(LVSPEC, tmp_path)
    assert jobs["generate"] == jobs["score"] == len(cells)
    judged = [c for c in cells if c.dataset in ("vdc", "vdd", "moviechat")]
    assert jobs["judge"] == len(judged)
    assert not (tmp_path / "results").exists()


DREAM = ROOT / "config" / "presets" / "dream.yaml"


def test_dream_preset_resolves_into_the_papers_table_and_dry_runs(tmp_path):
    cfg = mmconfig.load(DREAM)
    cells = mmcells.cells(cfg)
    main = {c.spec.method for c in cells if c.pair == "llava16_7b"}
    table1 = {"spd", "kangaroo", "medusa", "hydra", "eagle", "eagle2", "dream"}
    ablations = {"dream_nocross", "dream_fixed", "dream_nointer", "dream_paperloss"}
    assert table1 | {"ar"} | ablations == main
    for pair in ("llava16_13b", "pixtral_12b", "smolvlm_2b", "gemma3_12b"):
        # Pixtral's chain DREAM against Kangaroo (Figure 4(b))
        chain = {"kangaroo"} if pair == "pixtral_12b" else set()
        assert {c.spec.method for c in cells if c.pair == pair} == {"ar", "eagle2", "dream"} | chain
    blocks = {c.spec.params["head_layers"] for c in cells if c.method == "eagle2_blocks"}
    assert blocks == {3, 4}  # Table 2's E2-3B and E2-4B
    assert {c.spec.temperature for c in cells if c.spec.method == "dream"} == {0.0, 1.0}
    assert {c.spec.params["dream_vtc"] for c in cells if c.method == "dream_vtc"} == {
        1.0,
        0.5,
        0.25,
    }
    heads = {mmcells.drafter_dir(c) for c in cells} - {None}
    assert all(
        c.spec.params["head_steps"] == 68000 and c.spec.params["head_lr"] == 3e-5
        for c in cells
        if mmcells.drafter_dir(c)
    )
    jobs = _dry_run_jobs(DREAM, tmp_path)
    assert jobs["generate"] == jobs["score"] == len(cells)
    # one head per (pair, kind, training): DREAM's ablations train their own, VTC does not
    # (7B: Kangaroo, Medusa, Hydra, EAGLE for both EAGLE rows and its 3- and 4-block heads,
    # DREAM and its five ablations, Static-50% and Static-75% apart; Pixtral's Kangaroo); DREAM's
    # chain drafts with DREAM's head
    assert jobs["train_drafter"] == len(heads) == 12 + 4 * 2 + 1
    chains = [c for c in cells if c.method == "dream_chain"]
    assert {(c.pair, c.dataset) for c in chains} == {
        (p, d) for p in ("llava16_7b", "pixtral_12b") for d in ("mmt_bench", "scienceqa")
    }
    assert {mmcells.drafter_dir(c) for c in chains} <= heads
    assert {
        c.spec.params["dream_fixed_depth"] for c in cells if c.spec.method == "dream_fixed"
    } == {
        0.5,
        0.75,
    }
    assert not (tmp_path / "results").exists()
