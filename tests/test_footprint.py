"""Per-job memory requests from model sizes (models.footprint) and their wiring into the rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from workflow_cli import snakemake_cmd

from mmspec.models import footprint
from mmspec.sweep.cells import model_slug
from mmspec.toy import tiny

ROOT = Path(__file__).resolve().parents[1]
GPU_RULES = ("cache_visual", "caption", "generate")
# llava-hf/llava-1.5-7b-hf's config.json, as far as its size goes (7,063,427,072 parameters)
LLAVA_15_7B = {
    "model_type": "llava",
    "text_config": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32064,
    },
    "vision_config": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "patch_size": 14,
    },
}


@pytest.fixture(autouse=True)
def fresh_sizes():
    """Sizes are cached per (ref, dtype) for the DAG; each test starts from none."""
    footprint.footprint.cache_clear()
    yield
    footprint.footprint.cache_clear()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny.save("qwen2_5_vl", tmp_path_factory.mktemp("footprint") / "qwen", seed=0)


def _data_bytes(path: Path) -> int:
    """The tensor bytes of a safetensors file: its size less the length word and header."""
    with open(path, "rb") as f:
        (header,) = struct.unpack("<Q", f.read(8))
    return path.stat().st_size - 8 - header


def test_saved_model_counts_its_safetensors_bytes_in_each_dtype(tiny_dir, tmp_path):
    stored = _data_bytes(tiny_dir / "model.safetensors")  # saved in float32
    found = footprint.footprint(str(tiny_dir), "float32")
    assert found == footprint.Footprint(stored, "safetensors")
    assert footprint.footprint(str(tiny_dir), "bfloat16").bytes * 2 == stored
    assert footprint.footprint(str(tiny_dir), "float16").bytes * 2 == stored
    # a checkpoint stored in bfloat16 and loaded in float32 takes twice its file
    model, _ = tiny.build("qwen2_5_vl", seed=0)
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    half = _data_bytes(tmp_path / "bf16" / "model.safetensors")
    assert half * 2 == stored
    assert footprint.footprint(str(tmp_path / "bf16"), "float32").bytes == stored


def test_hf_cache_snapshot_is_read_like_a_folder(tiny_dir, tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--org--tiny-qwen" / "snapshots" / "abc123"
    shutil.copytree(tiny_dir, snapshot)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    found = footprint.footprint("org/tiny-qwen", "bfloat16")
    assert found == footprint.footprint(str(tiny_dir), "bfloat16")


def test_config_only_estimates_parameters(tiny_dir, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAVA_15_7B))
    found = footprint.footprint(str(tmp_path), "float16")
    assert found.source == "config"
    assert found.bytes / 2 == pytest.approx(7_063_427_072, rel=0.02)
    # the tiny model's own config: same order as its weights (its vision tower dominates)
    shutil.copy(tiny_dir / "config.json", tmp_path / "config.json")
    footprint.footprint.cache_clear()
    estimate = footprint.footprint(str(tmp_path), "float32")
    exact = footprint.footprint(str(tiny_dir), "float32")
    assert estimate.source == "config" and 0.4 < estimate.bytes / exact.bytes < 1.5


@pytest.mark.parametrize(
    ("ref", "params"),
    [
        ("Qwen/Qwen2.5-VL-72B-Instruct", 72e9),
        ("llava-hf/llava-onevision-qwen2-0.5b-ov-hf", 0.5e9),
        ("mjbooo/lvlm68m", 68e6),
        ("HuggingFaceTB/SmolVLM-256M-Instruct", 256e6),
        ("mistralai/Mixtral-8x7B-v0.1", 56e9),
        ("microsoft/Florence-2-large-ft", None),
    ],
)
def test_hub_ids_not_downloaded_are_sized_by_name(ref, params, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing downloaded
    found = footprint.footprint(ref, "bfloat16")
    if params is None:
        assert found == footprint.Footprint(None, "unknown")
    else:
        assert found == footprint.Footprint(int(params) * 2, "name")


def test_job_memory_adds_the_models_and_falls_back_when_one_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    target, draft = ("org/target-7B", "bfloat16"), ("org/draft-68m", "bfloat16")
    memory = footprint.job_memory([target, draft])
    # 1.2 x (7e9 + 68e6) x 2 bytes = 16177 MiB; plus 4000 (host) or 1500 (GPU), rounded up
    assert (memory.host_mb, memory.gpu_mb) == (21000, 18000)
    # the same model as target and draft is two copies in memory
    assert footprint.job_memory([target, target]).host_mb > memory.host_mb
    unknown = footprint.job_memory([target, ("org/florence", "float32")])
    assert (unknown.host_mb, unknown.gpu_mb) == (
        footprint.FALLBACK_HOST_MB,
        footprint.FALLBACK_GPU_MB,
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"hidden": 256, "layers": 4, "heads": 4, "vision_hidden": 128, "steps": 10},
        {"hidden": 64, "layers": 1, "heads": 2, "vision_hidden": 64, "steps": 10},
    ],
)
def test_toy_models_not_trained_yet_are_sized_from_their_config(spec, tmp_path, monkeypatch):
    from mmspec.toy import processor as toy_processor
    from mmspec.toy import training as toy_training
    from mmspec.toy.recipe import ToyRecipe

    monkeypatch.chdir(tmp_path)  # no results/models/toy here
    assert footprint.footprint("toy:target", "float32").source == "unknown"
    found = footprint.model_footprint("toy:target", "float32", {"target": spec})
    recipe = ToyRecipe.parse(spec)
    model = toy_training.build_model(recipe, toy_processor.build_processor().tokenizer, 0)
    params = sum(p.numel() for p in model.parameters())
    assert found.source == "toy config" and found.bytes / 4 == pytest.approx(params, rel=0.05)


def test_slurm_profile_leaves_memory_of_gpu_rules_to_the_rules():
    profile = yaml.safe_load((ROOT / "slurm" / "config.yaml").read_text())
    for rule in GPU_RULES:
        assert "mem_mb" not in profile["set-resources"][rule], rule
        assert profile["set-resources"][rule]["gpu"] == 1


def _planned(config: dict, workdir: Path, *args: str) -> dict[str, list[tuple[dict, dict]]]:
    """rule -> (wildcards, resources) of each job a dry run plans."""
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = snakemake_cmd(workdir, path, "--dry-run", *args, cores=4)
    env = {**os.environ, "HF_HUB_CACHE": str(workdir / "hub"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]

    def fields(block: str, key: str) -> dict:
        found = re.search(rf"^\s+{key}: (.*)$", block, re.M)
        values = dict(item.split("=", 1) for item in found[1].split(", ")) if found else {}
        # a batch of cells (mmspec.workflow.batches):
        # dataset=<d>/pair=<p>/method=<m>/seed=<s>/part-<k>
        batch = values.get("batch", "")
        values |= dict(part.split("=", 1) for part in batch.split("/") if "=" in part)
        return values

    planned: dict[str, list[tuple[dict, dict]]] = {}
    # a dry run lists grouped jobs (the method cells' generate) indented under their group
    for block in re.split(r"^(?=\s*rule \w+:)", out.stdout + out.stderr, flags=re.M):
        head = re.match(r"\s*rule (\w+):", block)
        if head:
            planned.setdefault(head[1], []).append(
                (fields(block, "wildcards"), fields(block, "resources"))
            )
    return planned


def test_dry_run_requests_memory_from_the_models(tiny_dir, tmp_path):
    """A 7B target with a 68M draft (sized by name, nothing downloaded) and a local tiny model
    drafting for itself (sized by its safetensors): every generate and cache_visual job asks
    for what the models it loads need."""
    big = [("org/target-7B", "bfloat16"), ("org/draft-68m", "bfloat16")]
    small = [(str(tiny_dir), "float32")] * 2
    config = {
        "datasets": {"toy_caption": {"source": "toy", "samples": 2}},
        "pairs": {
            "big": {"target": big[0][0], "draft": big[1][0], "dtype": "bfloat16"},
            "tiny": {"target": str(tiny_dir), "draft": str(tiny_dir)},
        },
        "methods": {"ar": {}, "sd": {"gamma": 3}},
    }
    models = {"big": big, "tiny": small}
    planned = _planned(config, tmp_path)
    assert len(planned["generate"]) == 4
    for wildcards, resources in planned["generate"]:
        loaded = models[wildcards["pair"]][: 1 if wildcards["method"] == "ar" else 2]
        memory = footprint.job_memory(loaded)
        assert resources["mem_mb"] == str(memory.host_mb), wildcards
        assert resources["gpu_mem_mb"] == str(memory.gpu_mb), wildcards
    hosts = {w["pair"] + "/" + w["method"]: int(r["mem_mb"]) for w, r in planned["generate"]}
    assert hosts["big/sd"] == 21000 and hosts["tiny/sd"] == 5000
    slugs = {model_slug(ref): (ref, dtype) for ref, dtype in big + small}
    assert len(planned["cache_visual"]) == 3  # the tiny model once, as target and draft
    for wildcards, resources in planned["cache_visual"]:
        memory = footprint.job_memory([slugs[wildcards["model"]]])
        assert resources["mem_mb"] == str(memory.host_mb), wildcards


def test_under_the_slurm_profile_the_rules_memory_applies(tmp_path):
    """The profile's resources (its executor left out: a dry run submits nothing) and the
    rules' derived memory both reach the jobs; other rules get the profile's default."""
    profile = yaml.safe_load((ROOT / "slurm" / "config.yaml").read_text())
    local = tmp_path / "profile"
    local.mkdir()
    kept = {k: profile[k] for k in ("default-resources", "set-resources")}
    (local / "config.yaml").write_text(yaml.safe_dump(kept))
    big = [("org/target-7B", "bfloat16"), ("org/draft-68m", "bfloat16")]
    config = {
        "datasets": {"toy_caption": {"source": "toy", "samples": 2}},
        "pairs": {"big": {"target": big[0][0], "draft": big[1][0], "dtype": "bfloat16"}},
        "methods": {"ar": {}, "sd": {"gamma": 3}},
    }
    planned = _planned(config, tmp_path, "--profile", str(local))
    slugs = {model_slug(ref): (ref, dtype) for ref, dtype in big}
    for rule in ("cache_visual", "generate"):
        for wildcards, resources in planned[rule]:
            if rule == "generate":
                memory = footprint.job_memory(big[: 1 if wildcards["method"] == "ar" else 2])
            else:
                memory = footprint.job_memory([slugs[wildcards["model"]]])
            assert resources["mem_mb"] == str(memory.host_mb), (rule, wildcards)
            assert resources["gpu"] == "1"
            assert resources["runtime"] == str(profile["set-resources"][rule]["runtime"])
    assert {r["mem_mb"] for _, r in planned["prepare"]} == {
        str(profile["default-resources"]["mem_mb"])
    }
