"""The toy target's visual alignment objective (toy recipe key `visual_alignment`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmspec.decoding.acceptance.loose import visual_relevance
from mmspec.models import loading
from mmspec.sweep import config as mmconfig
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as tw
from mmspec.toy.recipe import ToyRecipe


@pytest.fixture(scope="module")
def tokenizer():
    return toy_processor.build_processor().tokenizer


def test_alignment_targets_mark_the_patches_that_show_each_word(tokenizer):
    (turns,) = list(tw.training_turns(["toy_vdesc"], 1, seed=4))
    messages, images = tw.training_example(turns)
    ids, labels = toy_training.encode_example(messages, tokenizer, text_only=False)
    positions, mask = toy_training.alignment_targets(turns, ids, labels, tokenizer, False)
    words = tokenizer.convert_ids_to_tokens(ids)
    shows = tw.video_patch_words(turns[0].scenes, toy_processor.PATCH_SIZE)
    assert mask.shape == (len(positions), len(images) * toy_processor.IMAGE_TOKENS)
    answer = {t for t in range(len(ids)) if labels[t] != toy_training.IGNORE}
    named = {t for t in answer if words[t] in toy_training.ALIGNED_WORDS}
    assert set(positions.tolist()) == named  # every such answer word, nothing else
    for t, row in zip(positions.tolist(), mask, strict=True):
        assert row.tolist() == [words[t] in patch for patch in shows]
    assert toy_training.alignment_targets(turns, ids, labels, tokenizer, True) is None
    null_positions, null_mask = toy_training.alignment_targets(
        turns, ids, labels, tokenizer, False, null=True
    )
    others = {t for t in answer if words[t] not in tw.VISUAL_WORDS}
    assert set(null_positions.tolist()) == named | others
    for t, row in zip(null_positions.tolist(), null_mask, strict=True):
        assert row.any() == (t in named)


def test_alignment_loss_rewards_states_near_the_patches_that_show_the_word():
    hidden = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(0))
    visual = torch.tensor([[True, True, True, False, False, False]])
    shows = [(torch.tensor([4]), torch.tensor([[False, True, False]]))]
    far = toy_training.alignment_loss(hidden, visual, shows)
    near = hidden.clone()
    near[0, 4] = hidden[0, 1]  # the word's state is the showing patch's
    assert toy_training.alignment_loss(near, visual, shows) < far
    assert toy_training.alignment_loss(hidden, visual, [None]) == 0


def test_the_null_choice_rewards_a_non_visual_word_far_from_every_patch():
    hidden = torch.randn(1, 6, 8, generator=torch.Generator().manual_seed(1))
    visual = torch.tensor([[True, True, True, False, False, False]])
    filler = [(torch.tensor([5]), torch.tensor([[False, False, False]]))]
    near = hidden.clone()
    near[0, 5] = hidden[0, 2]  # the filler's state is a patch's
    away = hidden.clone()
    away[0, 5] = -hidden[0, :3].sum(0)  # opposite to the patches
    loss = lambda h: toy_training.alignment_loss(h, visual, filler)  # noqa: E731
    assert loss(away) < loss(hidden) and loss(away) < loss(near)
    both = [(torch.tensor([4, 5]), torch.tensor([[False, True, False], [False, False, False]]))]
    named = hidden.clone()
    named[0, 4] = hidden[0, 1] * 3  # the word at its patch, far above the null's cosine
    assert toy_training.alignment_loss(named, visual, both) < toy_training.alignment_loss(
        hidden, visual, both
    )


def test_training_with_alignment_raises_the_relevance_of_visual_words(tmp_path, tokenizer):
    """A small target trained with the alignment loss ranks the words that name what patches
    show above the rest by LVSpec's relevance more than one trained without it."""
    spec = {
        "hidden": 32,
        "layers": 2,
        "heads": 2,
        "vision_hidden": 32,
        "steps": 60,
        "batch_size": 4,
        "lr": 0.003,
        "scenarios": ["toy_vdesc"],
        "vdesc_style": "a",
    }
    gaps = {}
    for weight in (0.0, 1.0):
        folder = tmp_path / f"w{weight}"
        recipe = ToyRecipe.parse({**spec, "visual_alignment": weight})
        toy_training.train(recipe, folder, seed=0)
        model = loading.load_model(str(folder), torch.device("cpu"), "float32")
        image_id = model.config.image_token_index
        named, other = [], []
        for turns in tw.training_turns(["toy_vdesc"], 6, seed=21):
            messages, images = tw.training_example(turns)
            ids, labels = toy_training.encode_example(messages, tokenizer, text_only=False)
            with torch.inference_mode():
                out = model(
                    input_ids=torch.tensor([ids]),
                    pixel_values=toy_processor.pixel_values(np.stack(images)),
                    output_hidden_states=True,
                )
            hidden = out.hidden_states[-1][0]
            relevance = visual_relevance(hidden, hidden[torch.tensor(ids) == image_id], 10)
            words = tokenizer.convert_ids_to_tokens(ids)
            for t in range(len(ids)):
                if labels[t] != toy_training.IGNORE and words[t] != "<eos>":
                    bucket = named if words[t] in toy_training.ALIGNED_WORDS else other
                    bucket.append(float(relevance[t]))
        gaps[weight] = np.mean(named) - np.mean(other)
    assert gaps[1.0] > gaps[0.0] + 0.05


def test_bad_alignment_keys_are_named():
    config = mmconfig.load_as_snakemake("config/presets/toy_lvspec.yaml")
    config["toy"]["models"]["vdraft"]["vdesc_style"] = "c"
    with pytest.raises(mmconfig.ConfigError, match="vdraft.vdesc_style: unknown house style"):
        mmconfig.validate(config, overrides={})
    config["toy"]["models"]["vdraft"]["vdesc_style"] = "b"
    for noise in (0.5, -0.1):
        config["toy"]["models"]["vdraft"]["vdesc_colour_noise"] = noise
        with pytest.raises(mmconfig.ConfigError, match="vdesc_colour_noise"):
            mmconfig.validate(config, overrides={})
    config["toy"]["models"]["vdraft"]["vdesc_colour_noise"] = 0.2
    for share in (1.5, -0.25):
        config["toy"]["models"]["vtarget"]["vdesc_foreign_share"] = share
        with pytest.raises(mmconfig.ConfigError, match="vdesc_foreign_share"):
            mmconfig.validate(config, overrides={})
    config["toy"]["models"]["vtarget"]["vdesc_foreign_share"] = 0.25
    config["toy"]["models"]["vdraft"]["visual_alignment"] = -1
    with pytest.raises(mmconfig.ConfigError, match="visual_alignment"):
        mmconfig.validate(config, overrides={})
