"""SpecVLM's view S: visual tokens kept by the target's own text-to-visual attention."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mmspec.decoding.decoder import Decoder, visual_attention
from mmspec.decoding.sampler import seeded
from mmspec.decoding.views import (
    FullView,
    ImageInput,
    SpecVLMView,
    ViewContext,
    verifier_guided_keep,
)
from mmspec.methods import registry
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.models.visual import projector_of

FRAMES = 8
VIDEO_PROMPT = "<bos> user :" + " <image>" * FRAMES + " describe the image . assistant :"


def test_keep_takes_top_attention_up_to_mass_then_fills_uniformly():
    scores = torch.zeros(40)
    scores[[7, 23, 31]] = torch.tensor([0.5, 0.3, 0.1])
    scores[scores == 0] = 0.1 / 37
    # budget int(40 * (1 - 0.8)) = 7 (40 * 0.19999999999999996, as the release computes it);
    # mass 0.6 is reached by tokens 7 and 23 (0.8)
    kept = verifier_guided_keep(scores, drop=0.8, mass=0.6)
    assert len(kept) == 7
    assert kept.tolist() == sorted(kept.tolist())
    assert {7, 23} <= set(kept.tolist())
    rest = [k for k in kept.tolist() if k not in (7, 23)]
    # the 5 others are spread over the remaining tokens, first and last included
    assert rest[0] == 0 and rest[-1] == 39 and len(set(rest)) == 5
    # mass 0: no attention-picked token beyond the first, the budget is all uniform
    uniform = verifier_guided_keep(scores, drop=0.8, mass=0.0)
    assert len(uniform) == 7 and 0 in uniform.tolist()
    # the attention share is capped at the budget
    assert verifier_guided_keep(scores, drop=0.95, mass=1.0).tolist() == [7, 23]


@pytest.mark.parametrize("n", [16, 128, 160, 1000, 6272])
def test_drop_09_keeps_at_most_ten_percent(n):
    kept = verifier_guided_keep(torch.rand(n, generator=torch.Generator().manual_seed(n)), 0.9, 0.4)
    # the release's budget, int(n * (1 - 0.9)): 15 of 160, 99 of 1000
    assert len(kept) == int(n * (1 - 0.9)) and len(set(kept.tolist())) == len(kept)


def _release_keep(scores: list[float], drop_rate: float, percentage: float) -> list[int]:
    """An oracle transcribed from SpecVLM's release (`utils/utils.py`:
    `get_attention_token_from_percentage`, then `drop_visual_tokens_specvlm` with `percentage`,
    its `inference.py` call): the kept indices of the visual tokens."""
    n = len(scores)
    tokens_to_keep = int(n * (1 - drop_rate))
    tensor = torch.tensor(scores)
    ordered, _ = torch.sort(tensor, descending=True)
    target_sum = tensor.sum() * percentage
    current_sum, attention_tokens = 0.0, 0
    for score in ordered:
        current_sum += score
        attention_tokens += 1
        if current_sum >= target_sum:
            break
    if attention_tokens > tokens_to_keep:
        attention_tokens, uniform_tokens = tokens_to_keep, 0
    else:
        uniform_tokens = tokens_to_keep - attention_tokens
    _, attention_sorted = torch.sort(tensor, descending=True)
    attention_indices = attention_sorted[:attention_tokens]
    available = torch.ones(n, dtype=torch.bool)
    available[attention_indices] = False
    positions = torch.where(available)[0]
    picks = torch.linspace(0, len(positions) - 1, uniform_tokens, dtype=torch.long)
    return torch.sort(torch.cat([attention_indices, positions[picks]]))[0].tolist()


@pytest.mark.parametrize("drop", [0.9, 0.8, 0.5])
@pytest.mark.parametrize("mass", [0.0, 0.4, 0.9, 1.0])
def test_keep_is_the_releases_rule(drop, mass):
    """The kept set equals the release's on scores without ties, over sizes where its float
    budget and integer linspace matter (multiples of 10; 17 tokens spread over 200)."""
    g = torch.Generator().manual_seed(11)
    for n in [10, 40, 160, 196, 200, 576, 1000, 1568, 1960, 6272]:
        # attention-like: a few heavy tokens over a long light tail, no two scores equal
        scores = torch.rand(n, generator=g).pow(6) + torch.arange(n) * 1e-9
        scores = (scores / scores.sum()).tolist()
        kept = verifier_guided_keep(torch.tensor(scores), drop, mass).tolist()
        assert kept == _release_keep(scores, drop, mass), (n, drop, mass)


def test_keep_sums_scores_in_float32_as_the_release_does():
    """Near-uniform scores (a long video's tail): where the running float32 sum crosses `mass`
    depends on its rounding; the release adds one score at a time (seed 2: 5642 tokens reach
    0.9 of the mass, where torch's cumsum says 5643)."""
    g = torch.Generator().manual_seed(2)
    scores = 1 + 0.01 * torch.rand(6272, generator=g)
    scores = (scores / scores.sum()).tolist()
    kept = verifier_guided_keep(torch.tensor(scores), 0.1, 0.9).tolist()
    assert kept == _release_keep(scores, 0.1, 0.9)


def _frames(model, g, n=FRAMES):
    feats = [torch.randn(16, model.config.vision_config.hidden_size, generator=g) for _ in range(n)]
    with torch.no_grad():
        return [ImageInput(projector_of(model)(f), f) for f in feats]


def test_prefill_scores_visual_tokens_by_text_attention(processor, target_model):
    tok = processor.tokenizer
    ctx = ViewContext(tok, target_model.get_input_embeddings(), "<image>")
    prompt = FullView().build(VIDEO_PROMPT, _frames(target_model, torch.Generator()), ctx)
    plain = Decoder(target_model).prefill(prompt.embeds)
    scored = Decoder(target_model).prefill(prompt.embeds, score_visual=prompt.visual)
    # the same forward: logits as without scoring (eager vs SDPA rounding only)
    torch.testing.assert_close(scored.logits, plain.logits, atol=1e-4, rtol=1e-4)
    # reference: every layer's attention weights, mean over heads, text queries, layers
    stack = target_model.model.language_model
    stack.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            out = stack(inputs_embeds=prompt.embeds[None], output_attentions=True)
    finally:
        stack.config._attn_implementation = "sdpa"
    last_visual = int(torch.nonzero(prompt.visual).max())
    per_layer = [a[0].mean(0)[last_visual + 1 :].mean(0) for a in out.attentions]
    expected = torch.stack(per_layer).mean(0)[prompt.visual]
    assert scored.visual_attention.shape == (FRAMES * 16,)
    torch.testing.assert_close(scored.visual_attention, expected)


def test_view_s_keeps_the_attended_tokens_across_frames(processor, draft_model):
    tok = processor.tokenizer
    ctx = ViewContext(tok, draft_model.get_input_embeddings(), "<image>")
    frames = _frames(draft_model, torch.Generator().manual_seed(3))
    attention = torch.full((FRAMES * 16,), 1e-3)
    attention[[5, 70, 127]] = 1.0  # frames 0, 4 and 7
    parts = torch.split(attention, 16)
    images = [ImageInput(f.embeds, attention=a) for f, a in zip(frames, parts, strict=True)]
    prompt = SpecVLMView(drop=0.9, mass=0.4).build(VIDEO_PROMPT, images, ctx)
    assert prompt.n_visual == 12  # floor(128 * 0.1), one budget over all frames
    kept = prompt.embeds[prompt.visual]
    for frame, token in [(0, 5), (4, 70 - 64), (7, 127 - 112)]:
        row = frames[frame].embeds[token]
        assert any(torch.equal(row, k) for k in kept), (frame, token)
    with pytest.raises(ValueError, match="attention scores"):
        SpecVLMView(0.9, 0.4).build(VIDEO_PROMPT, frames, ctx)
    short = [ImageInput(f.embeds[:8], attention=a) for f, a in zip(frames, parts, strict=True)]
    with pytest.raises(ValueError, match="same visual tokens"):
        SpecVLMView(0.9, 0.4).build(VIDEO_PROMPT, short, ctx)


@pytest.mark.parametrize("method", ["specvlm", "sage"])
def test_specvlm_and_sage_are_lossless_and_read_a_tenth_of_the_frames(
    processor, target_model, near_draft_model, method
):
    spec = registry.resolve(method, {"temperature": 0.0})
    assert spec.views == "S" and spec.part("view").values["drop"] == 0.9
    tok = processor.tokenizer
    runner = MethodRunner(spec, target_model, near_draft_model, tok, "<image>")
    stop = {tok.eos_token_id}
    accepted = drafted = 0
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        sample = Sample(VIDEO_PROMPT, _frames(target_model, g), _frames(near_draft_model, g))
        ar = runner.decode_ar(sample, 40, stop, None)
        sd = runner.decode(sample, 40, stop, seeded(seed))
        assert sd.tokens == ar.tokens
        assert runner.last_target_visual == FRAMES * 16
        assert runner.last_draft_visual == int(FRAMES * 16 * 0.1)
        accepted += sum(s.accepted for s in sd.steps)
        drafted += sum(s.drafted for s in sd.steps)
    # equal tokens prove nothing where the draft never matched: some drafts are accepted, some not
    assert 0 < accepted < drafted, (accepted, drafted)


def test_view_s_in_bfloat16_keeps_the_cache_ar_builds(processor, target_model, draft_model):
    """View S reads the target's attention from an eager forward of its own: in bf16, where eager
    and SDPA round differently, the prefill that scores gives bit-identical logits and KV cache
    to AR's prefill (an eager prefill would not), and greedy view S drafting equals AR."""
    import copy

    target = copy.deepcopy(target_model).to(torch.bfloat16)
    draft = copy.deepcopy(draft_model).to(torch.bfloat16)
    ctx = ViewContext(processor.tokenizer, target.get_input_embeddings(), "<image>")
    tok = processor.tokenizer
    # gamma 1: longer bf16 verification forwards round differently from one-token decoding
    # whatever the view (the README's low-precision caveat); this isolates view S
    spec = registry.resolve("sd", {"temperature": 0.0, "views": "S", "gamma": 1})
    runner = MethodRunner(spec, target, draft, tok, "<image>")
    eager_differs = False
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        t_frames = [replace(f, embeds=f.embeds.bfloat16()) for f in _frames(target_model, g)]
        d_frames = [replace(f, embeds=f.embeds.bfloat16()) for f in _frames(draft_model, g)]
        prompt = FullView().build(VIDEO_PROMPT, t_frames, ctx)
        plain, scoring = Decoder(target), Decoder(target)
        logits = plain.prefill(prompt.embeds).logits
        assert torch.equal(logits, scoring.prefill(prompt.embeds, prompt.visual).logits)
        for a, b in zip(plain.cache.layers, scoring.cache.layers, strict=True):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        with visual_attention(target.model.language_model, prompt.visual):
            # transformers' forward (the lean one always runs SDPA) under eager attention
            eager = Decoder(target, lean=False).prefill(prompt.embeds).logits
            eager_differs |= not torch.equal(logits, eager)
        sample = Sample(VIDEO_PROMPT, t_frames, d_frames)
        ar = runner.decode_ar(sample, 40, {tok.eos_token_id}, None)
        sd = runner.decode(sample, 40, {tok.eos_token_id}, seeded(seed))
        assert sd.tokens == ar.tokens
        assert runner.last_draft_visual == int(FRAMES * 16 * 0.1)
    assert eager_differs  # the check can fail: the eager kernel does round differently here


@pytest.mark.parametrize("method", ["specvlm", "sd_chain"])
def test_self_sd_the_target_drafts_for_itself_losslessly(processor, target_model, method):
    """Self-SD (pair `draft: self`): one model object in both roles, each with its own cache;
    greedy output equals AR's, and the draft forwards are counted apart from the target's."""
    spec = registry.resolve(method, {"temperature": 0.0, "views": "S", "drop": 0.9})
    tok = processor.tokenizer
    runner = MethodRunner(spec, target_model, target_model, tok, "<image>")
    g = torch.Generator().manual_seed(7)
    frames = _frames(target_model, g)
    sample = Sample(VIDEO_PROMPT, frames, frames)
    stop = {tok.eos_token_id}
    ar = runner.decode_ar(sample, 40, stop, None)
    runner.reset_stats()
    sd = runner.decode(sample, 40, stop, seeded(0))
    assert sd.tokens == ar.tokens
    forwards, _ = runner.draft_forward_stats()
    assert 0 < forwards <= sum(s.drafted for s in sd.steps)
    assert runner.last_draft_visual == int(FRAMES * 16 * 0.1)
    # the target drafts its own tokens: from the pruned view it still agrees often
    assert sum(s.accepted for s in sd.steps) > 0
