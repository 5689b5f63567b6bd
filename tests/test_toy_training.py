"""Toy training's encoding of examples (mmspec.toy.training)."""

from __future__ import annotations

import pytest

from mmspec.data import media
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as tw
from mmspec.toy.recipe import ToyRecipe

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


def test_foreign_descriptions_teach_all_but_their_style_words():
    """vdesc_foreign_share: that share of a recipe's toy_vdesc examples come in no house style,
    every answer word learned but the style's choices; the rest keep the recipe's style, and a
    recipe without the key gets the data it always had."""
    tokenizer = toy_processor.build_processor().tokenizer
    spec = {"steps": 24, "batch_size": 8, "scenarios": ["toy_vdesc"], "vdesc_style": "a"}
    spec = {"hidden": 16, "layers": 1, **spec}
    style_ids = set(tokenizer.convert_tokens_to_ids(sorted(tw.STYLE_WORDS)))
    then = tokenizer.convert_tokens_to_ids("then")

    def examples(extra: dict) -> list[tuple[list, list]]:
        batches = toy_training.make_batches(ToyRecipe.parse(spec | extra), tokenizer, 3)
        return [(e["ids"], e["labels"]) for batch in batches for e in batch]

    plain, mixed = examples({}), examples({"vdesc_foreign_share": 0.25})
    assert plain == examples({"vdesc_foreign_share": 0.0})
    foreign = [e for e in mixed if e not in plain]
    own = [e for e in mixed if e in plain]
    assert len(foreign) == 48 and len(own) == 144  # a quarter of 192
    for part in (foreign, own):
        for ids, labels in part:
            start = next(i for i, y in enumerate(labels) if y != toy_training.IGNORE)
            answer = list(zip(ids[start:], labels[start:], strict=True))
            assert any(t in style_ids for t, _ in answer)
            unlabelled = [t in style_ids and part is foreign for t, _ in answer]
            assert [y == toy_training.IGNORE for _, y in answer] == unlabelled
    # style a leaves "then" out 99% of the time; uniform descriptions write it in half (of those
    # with a second object, whose sentence the connector "meanwhile , [then]" opens)
    comma = tokenizer.convert_tokens_to_ids(",")
    for part, low, high in ((foreign, 0.3, 0.7), (own, 0.0, 0.05)):
        connected = [ids for ids, _ in part if comma in ids]
        assert len(connected) >= 10
        assert low <= sum(then in ids for ids in connected) / len(connected) <= high
