"""cache_visual computes features once; generate splices them in and never runs the vision tower."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from mmspec.stages import cache_visual, generate, prepare
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy.recipe import ToyRecipe

TINY = {
    "hidden": 32,
    "layers": 1,
    "heads": 2,
    "vision_hidden": 64,
    "steps": 2,
    "batch_size": 2,
    "lr": 1e-3,
    "scenarios": ["toy_diff"],
}


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("target", "draft"):
        toy_training.train(ToyRecipe.parse(TINY), f"results/models/toy/{name}", seed=0)
    prepare.run("toy_diff", {"source": "toy", "samples": 3}, "prepared.parquet", toy_seed=0)
    for name in ("target", "draft"):
        cache_visual.run(f"toy:{name}", "prepared.parquet", f"{name}.parquet", "float32", 1)
    return tmp_path


def test_cache_holds_every_distinct_image_once(workdir):
    prepared = pq.read_table("prepared.parquet").to_pylist()
    ids = {i for row in prepared for i in row["image_ids"]}
    cached = pq.read_table("target.parquet").to_pylist()
    assert sorted(r["image_id"] for r in cached) == sorted(ids)
    assert all(r["n_tokens"] == 16 for r in cached)


def test_generate_never_runs_the_vision_tower(workdir, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the vision tower ran during generation")

    from transformers.models.clip import modeling_clip

    monkeypatch.setattr(modeling_clip.CLIPVisionModel, "forward", refuse)
    monkeypatch.setattr(modeling_clip.CLIPVisionEmbeddings, "forward", refuse)
    from mmspec.methods.registry import resolve

    spec = resolve("sd", {"views": "MP", "gamma": 3}).to_dict()
    params = {
        "cell": {
            "dataset": "toy_diff",
            "pair": "toy",
            "method": "sd",
            "hp": "x",
            "seed": 0,
            "spec": spec,
        },
        "pair": {"target": "toy:target", "draft": "toy:draft", "dtype": "float32"},
        "generation": {"max_new_tokens": 6},
        "timing": {"warmup_samples": 1, "threads": 1},
    }
    generate.run(params, "prepared.parquet", "target.parquet", "draft.parquet", "out.parquet")
    rows = pq.read_table("out.parquet").to_pylist()
    assert len(rows) == 3
    # two images: M reads 2 x 16 visual tokens, P 2 x 4 pooled ones
    assert all(r["target_visual_tokens"] == 32 and r["draft_visual_tokens"] == 40 for r in rows)
    # and the guard does bite when the tower is called
    model = toy_training.build_model(ToyRecipe.parse(TINY), toy_processor.build_tokenizer(), 0)
    with pytest.raises(AssertionError, match="vision tower ran"):
        model.model.get_image_features(torch.zeros(1, 3, 32, 32))


def test_multi_crop_pixel_values_fail_clearly(processor, target_model):
    from mmspec.models import visual

    crops = torch.zeros(1, 5, 3, 32, 32)  # LLaVA-NeXT / OneVision anyres layout
    with pytest.raises(NotImplementedError, match="multi-crop"):
        visual.encode_images(target_model, crops)
