"""Toy training's encoding of examples (mmspec.models.toy_training)."""

from __future__ import annotations

import pytest

from mmspec.data import media
from mmspec.data import toyworld as tw
from mmspec.models import toy_processor, toy_training

SCENARIOS = ["toy_caption", "toy_vqa", "toy_diff", "toy_multiturn", "toy_story", "toy_video"]


@pytest.mark.parametrize("scenario, style", [(s, None) for s in SCENARIOS] + [("toy_vdesc", "b")])
@pytest.mark.parametrize("text_only", [False, True])
def test_encoding_equals_the_chat_template_and_tokenizer(scenario, style, text_only):
    """The compiled template and the backend tokenizer give the ids of transformers' own path."""
    tokenizer = toy_processor.build_processor().tokenizer
    expand = "\n" if text_only else "<image>" * toy_processor.IMAGE_TOKENS
    for turns in tw.training_turns([scenario], 5, seed=7, style=style):
        messages, _ = tw.training_example(turns)
        text = tokenizer.apply_chat_template(media.frames_as_images(messages), tokenize=False)
        expected = tokenizer(text.replace("<image>", expand), add_special_tokens=False).input_ids
        ids, labels = toy_training.encode_example(messages, tokenizer, text_only)
        assert ids == expected
        assert len(labels) == len(ids) and labels.count(toy_training.IGNORE) < len(ids)
