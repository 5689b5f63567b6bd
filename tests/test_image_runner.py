"""Image-generation cells' runner and model adapter: codebooks must match, views are M, and
what is not an image generator (or not a code grid) is named."""

from __future__ import annotations

import pytest
import torch

from mmspec.methods.image_runner import ImageMethodRunner
from mmspec.methods.registry import resolve
from mmspec.models.image_generation import ImageGenerator

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def generators(imagegen_dirs):
    return [ImageGenerator.load(str(d), CPU) for d in imagegen_dirs]


def test_a_draft_with_another_codebook_is_refused(generators):
    target, draft = generators  # the draft's VQ was fitted with another seed
    assert target.shares_codes_with(target) and not target.shares_codes_with(draft)
    with pytest.raises(ValueError, match="codes or codebook differ"):
        ImageMethodRunner(resolve("sd_chain", {}), target, draft, 3.0)


def test_views_other_than_m_are_refused(generators):
    target = generators[0]
    with pytest.raises(ValueError, match=r"views 'T'.*caption"):
        ImageMethodRunner(resolve("sd_chain", {"views": "T"}), target, target, 3.0)


def test_greedy_sd_with_the_target_as_draft_accepts_every_code(generators):
    target = generators[0]
    runner = ImageMethodRunner(resolve("sd_chain", {"gamma": 4}), target, target, 3.0)
    prompt = runner.prompt("a red circle top left .")
    sd, ar = runner.decode(prompt, None), runner.decode_ar(prompt, None)
    assert sd.tokens == ar.tokens and len(ar.tokens) == target.grid
    assert all(s.accepted == s.drafted for s in sd.steps[:-1])  # its own argmax every time


def test_the_lossless_check_and_the_probe_read_the_guided_target(generators):
    """The lossless check feeds codes to the guided target one at a time, as AR decodes them:
    AR's own codes leave nothing to report, a code changed at position 9 is found there (and
    the target's own picks after it, conditioned on the changed prefix, are not misses). The
    AR probe after a decode reads the cached prompt and steps as AR does."""
    target = generators[0]
    runner = ImageMethodRunner(resolve("sd_chain", {"gamma": 4}), target, target, 3.0)
    prompt = runner.prompt("a red circle top left .")
    ar = runner.decode_ar(prompt, None).tokens
    assert runner.argmax_misses(prompt, ar) == []
    changed = list(ar)
    start, end = target.code_range
    changed[9] = start + (changed[9] - start + 1) % (end - start)
    misses = runner.argmax_misses(prompt, changed)
    assert [i for i, _ in misses][:1] == [9]
    assert int(misses[0][1].argmax()) == ar[9]
    sd = runner.decode(prompt, None)
    probe = runner.probe_ar(prompt, sd.tokens[0], 6, None)
    assert probe.tokens == ar[:7] and len(probe.steps) == 6


def test_not_a_generator_or_not_a_grid_is_named(generators, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="not an image generator"):
        ImageGenerator.load(str(tmp_path), CPU)
    target = generators[0]
    start, _ = target.code_range
    with pytest.raises(ValueError, match=r"samples.parquet: row 1 is not a grid of 64"):
        target.images([[start] * 64, [start] * 63], "samples.parquet")
    assert target.images([[start] * 64], "x").shape == (1, 32, 32, 3)


def test_top_k_sampling_draws_among_the_k_best_codes(generators):
    from mmspec.decoding.guidance import GuidedDecoder
    from mmspec.decoding.sampler import seeded

    target = generators[0]
    caption = "a red circle top left ."
    greedy = ImageMethodRunner(resolve("ar", {}), target, None, 3.0)
    argmax = greedy.decode_ar(greedy.prompt(caption), None).tokens
    # k = 1 leaves one code per step: sampling, plain or speculative, is greedy decoding
    for method, hparams in [("ar", {}), ("sd_chain", {"acceptance": "sampling", "gamma": 3})]:
        runner = ImageMethodRunner(resolve(method, hparams, 1.0), target, target, 3.0, top_k=1)
        prompt = runner.prompt(caption)
        out = runner.decode(prompt, seeded(5))
        assert out.tokens == argmax, method
    sampler = ImageMethodRunner(resolve("ar", {}, 1.0), target, None, 3.0, top_k=3)
    drawn = sampler.decode_ar(sampler.prompt(caption), seeded(7)).tokens
    assert drawn != argmax  # it does sample
    replay = GuidedDecoder(target.decoder(), 3.0, target.code_range)  # untruncated
    logits = replay.prefill(target.prompt_embeds(caption)).logits[0]
    for token in drawn:
        assert token in logits.topk(3).indices.tolist()
        logits = replay.extend([token]).logits[0, -1]
