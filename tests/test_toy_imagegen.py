"""The toy image world: textured renders, the caption-conditioned code-grid generator (trained
with condition dropout), its folder loading as any causal LM, and its codebook for LANTERN."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from component_parts import part

from mmspec.methods.registry import resolve
from mmspec.models import loading
from mmspec.toy import imagegen as toy_imagegen
from mmspec.toy import world as toyworld
from mmspec.toy.vq import PatchVQ


def test_textured_renders_vary_per_draw_around_the_scene():
    scene = (toyworld.Obj("red", "circle", "top left"),)
    rng = np.random.default_rng(0)
    a, b = toyworld.render_textured(scene, rng), toyworld.render_textured(scene, rng)
    assert a.shape == (32, 32, 3) and a.dtype == np.uint8 and not np.array_equal(a, b)
    inside = a[:16, :16][toyworld.MASKS["circle"]].astype(float).mean(0)
    assert np.abs(inside - np.array(toyworld.RGB["red"])).max() < 4 * toyworld.SHADE
    assert a[16:, 16:].astype(float).mean() < 2 * toyworld.GRAIN  # an empty corner stays dark


@pytest.fixture
def generator(imagegen_dirs):
    folder = imagegen_dirs[0]
    return folder, json.loads((folder / "training.json").read_text())


def test_generator_folder_loads_as_a_causal_lm_with_its_codebook(generator):
    folder, record = generator
    assert record["final_loss"] < record["first_loss"]
    model = loading.load_model(str(folder), torch.device("cpu"), "float32")
    tokenizer = loading.load_processor(str(folder))
    meta = toy_imagegen.ImageGenMeta.load(folder)
    assert (meta.codes, meta.grid) == (32, 64)
    assert model.config.vocab_size == len(tokenizer) == meta.code_offset + meta.codes
    assert tokenizer.convert_ids_to_tokens(meta.code_offset + 5) == "<c5>"
    prompt = meta.prompt(tokenizer, "a red circle at the top left .")
    assert prompt[0] == meta.bos and prompt[-1] == meta.boi and tokenizer.unk_token_id not in prompt
    assert meta.prompt(tokenizer, None) == [meta.bos, meta.boi]  # the unconditional row
    vectors, offset = toy_imagegen.codebook_of(folder)
    assert vectors.shape == (32, 48) and offset == meta.code_offset
    lantern = resolve("sd_chain", {"acceptance": "lantern", "lantern_k": 4}).part("acceptance")
    rule = lantern.build(codebook=(vectors, offset))
    assert rule.params["neighbours"].of(offset + 3).shape == (4,)
    with pytest.raises(ValueError, match="lantern_k must be in"):
        part("acceptance", "lantern", lantern_k=40).build(codebook=(vectors, offset))


def test_condition_dropout_and_confidence(generator):
    folder, _ = generator
    tokenizer = loading.load_processor(str(folder))
    meta = toy_imagegen.ImageGenMeta.load(folder)
    vq = PatchVQ.load(folder)
    examples = list(toyworld.imagegen_examples(400, seed=1))
    rows = toy_imagegen.encode_examples(examples, vq, tokenizer, meta, 0.25, seed=0)
    unconditional = sum(ids[:2] == [meta.bos, meta.boi] for ids, _ in rows) / len(rows)
    assert 0.18 < unconditional < 0.32
    ids, labels = rows[0]
    assert len(ids) == len(labels) and labels.count(-100) == ids.index(meta.boi) + 1
    assert all(meta.code_offset <= t < meta.code_offset + 32 for t in labels if t != -100)
    model = loading.load_model(str(folder), torch.device("cpu"), "float32")
    top1, top10 = toy_imagegen.confidence(model, rows[:5])
    assert 0 < top1 <= top10 <= 1
