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


def test_a_drafter_declaring_drafts_images_is_built_as_the_text_path_builds_it(
    generators, monkeypatch
):
    """The runner builds any drafter that declares `drafts_images` through its own `build`
    (a plugin's too), handing it the guided draft generator; a text-only drafter is refused."""
    from mmspec.decoding import catalog
    from mmspec.decoding.drafters.model import ModelDrafter
    from mmspec.decoding.guidance import GuidedDecoder

    class EveryOtherStep(ModelDrafter):
        """A draft generator that proposes on every other step only (a plugin's drafter)."""

        name = "every_other_step"
        built = []

        @classmethod
        def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
            cls.built.append(draft)
            return cls(draft, temperature)

        def root(self, sampler):
            self.calls = getattr(self, "calls", 0) + 1
            return super().root(sampler) if self.calls % 2 else None

    catalog.load()
    monkeypatch.setitem(catalog.CATALOG.entries, ("drafter", EveryOtherStep.name), EveryOtherStep)
    target = generators[0]
    spec = resolve("sd_chain", {"drafter": EveryOtherStep.name, "gamma": 4})
    runner = ImageMethodRunner(spec, target, target, 3.0)
    assert type(runner.drafter) is EveryOtherStep
    assert len(EveryOtherStep.built) == 1 and isinstance(EveryOtherStep.built[0], GuidedDecoder)
    prompt = runner.prompt("a red circle top left .")
    sd, ar = runner.decode(prompt, None), runner.decode_ar(prompt, None)
    assert sd.tokens == ar.tokens
    proposed = [s.drafted > 0 for s in sd.steps]
    assert proposed[:4] == [True, False, True, False]  # the plugin's own drafting ran

    monkeypatch.setattr(EveryOtherStep, "drafts_images", False)
    with pytest.raises(ValueError, match="drafts text only; image generation drafts with one of"):
        ImageMethodRunner(spec, target, target, 3.0)
    # and a config sweeping it over image generation is refused before any job
    from mmspec.sweep import config as mmconfig

    cfg = mmconfig.load_as_snakemake("config/config.yaml")
    cfg["methods"] = {"plugin_sd": {"method": "sd_chain", "drafter": EveryOtherStep.name}}
    cfg["sweep"] = [
        {"datasets": ["toy_imagegen"], "pairs": ["toy_image"], "methods": ["plugin_sd"]}
    ]
    with pytest.raises(mmconfig.ConfigError, match="methods.plugin_sd: drafter 'every_other_step'"):
        mmconfig.validate(cfg)
