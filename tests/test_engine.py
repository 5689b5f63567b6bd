"""The decoding engine: speculative decoding is lossless, token for token and in distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from mmspec.decoding.acceptance import accept_greedy, accept_sampling
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import ModelDrafter
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.trees import ChainPolicy
from mmspec.decoding.views import ImageInput, ViewContext, make_view
from mmspec.decoding.weights import POLICIES, make_policy
from mmspec.models.visual import projector_of

PROMPT = "<bos> user : <image> describe the image . assistant :"
CAPTION = "a red circle at the top left ."


def _images(model, g):
    """One random 'cached' image for `model`: features before the projector and embeddings."""
    features = torch.randn(16, model.config.vision_config.hidden_size, generator=g)
    with torch.no_grad():
        embeds = projector_of(model)(features)
    return [ImageInput(embeds, features, CAPTION)]


def prompts(processor, target_model, draft_model, seed=0, views="MTCPU"):
    """Target (view M) prompt embeddings and the draft's prompt in each view of `views`."""
    tok = processor.tokenizer
    g = torch.Generator().manual_seed(seed)
    t_ctx = ViewContext(tok, target_model.get_input_embeddings(), "<image>")
    target = make_view("M").build(PROMPT, _images(target_model, g), t_ctx)
    d_ctx = ViewContext(
        tok, draft_model.get_input_embeddings(), "<image>", projector_of(draft_model)
    )
    d_img = _images(draft_model, g)
    return target.embeds, {v: make_view(v, 0.25).build(PROMPT, d_img, d_ctx).embeds for v in views}


def _greedy_pair(
    processor, target_model, draft_model, views, gamma, seed, policy="static", window=0
):
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, draft_prompts = prompts(processor, target_model, draft_model, seed)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    vocab = draft_model.get_output_embeddings().out_features
    drafter = ModelDrafter(
        Decoder(draft_model), 0.0, make_policy({"weights": policy}, vocab), window
    )
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        drafter,
        [draft_prompts[v] for v in views],
        ChainPolicy(gamma),
        accept_greedy,
        40,
        stop,
        0.0,
        torch.Generator().manual_seed(seed),
    )
    return ar, sd


@pytest.mark.parametrize("view", ["M", "T"])
@pytest.mark.parametrize("gamma", [1, 3, 5, 7])
def test_greedy_speculative_equals_ar_token_for_token(
    processor, target_model, draft_model, view, gamma
):
    for seed in range(3):
        ar, sd = _greedy_pair(processor, target_model, draft_model, view, gamma, seed)
        assert sd.tokens == ar.tokens
        assert all(0 <= s.accepted <= s.drafted == gamma for s in sd.steps)
        # every step emits accepted + 1 tokens (the last step may be cut at max_new / stop)
        assert 1 + sum(s.accepted + 1 for s in sd.steps) >= len(sd.tokens)


@pytest.mark.parametrize("view", ["C", "P", "U"])
def test_every_view_is_lossless(processor, target_model, draft_model, view):
    for seed in range(2):
        ar, sd = _greedy_pair(processor, target_model, draft_model, view, 3, seed)
        assert sd.tokens == ar.tokens


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("views", ["MT", "MTCP", "TU"])
def test_ensembles_are_lossless_under_every_policy(
    processor, target_model, draft_model, policy, views
):
    for seed, window in [(0, 0), (1, 1), (2, 4)]:
        ar, sd = _greedy_pair(processor, target_model, draft_model, views, 3, seed, policy, window)
        assert sd.tokens == ar.tokens
        for step in sd.steps:
            assert len(step.weights) == len(views)
            assert min(step.weights) >= 0 and abs(sum(step.weights) - 1) < 1e-5


def test_batched_rows_match_separate_runs(processor, draft_model):
    """Each padded row of a batched prefill + extends gives the logits of that prompt alone."""
    _, drafts = prompts(processor, draft_model, draft_model, views="MTCPU")
    rows = list(drafts.values())
    assert len({r.shape[0] for r in rows}) > 1  # the rows really need padding
    batched = Decoder(draft_model)
    first = batched.prefill(rows).logits
    steps = [batched.extend([7, 8]).logits, batched.extend([9]).logits]
    batched.truncate(batched.length - 1)
    redo = batched.extend([10]).logits
    for b, row in enumerate(rows):
        alone = Decoder(draft_model)
        torch.testing.assert_close(first[b], alone.prefill(row).logits[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(
            steps[0][b], alone.extend([7, 8]).logits[0], atol=1e-4, rtol=1e-4
        )
        alone.extend([9])
        alone.truncate(alone.length - 1)
        torch.testing.assert_close(redo[b], alone.extend([10]).logits[0], atol=1e-4, rtol=1e-4)


def test_self_drafting_accepts_everything(processor, target_model):
    """With the target as its own draft, every greedy proposal is accepted in full."""
    stop = set()  # decode exactly max_new tokens
    target_prompt, _ = prompts(processor, target_model, target_model)
    drafter = ModelDrafter(Decoder(target_model), 0.0)
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        drafter,
        [target_prompt],
        ChainPolicy(4),
        accept_greedy,
        31,
        stop,
        0.0,
        None,
    )
    ar = decode_ar(Decoder(target_model), target_prompt, 31, stop, 0.0, None)
    assert sd.tokens == ar.tokens and len(sd.tokens) == 31
    assert [s.accepted for s in sd.steps] == [4] * 6
    assert len(sd.steps) == 6  # 1 prefill token + 6 steps x 5 tokens


def test_sampling_rule_matches_target_distribution():
    """accept_sampling's first emitted token is distributed as p, whatever q proposes."""
    rng = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = torch.tensor([[0.05, 0.1, 0.15, 0.2, 0.5]])
    logits = p.log()
    counts = np.zeros(5)
    n = 20000
    for _ in range(n):
        token = int(torch.multinomial(q[0], 1, generator=rng))
        path, nxt = accept_sampling(Proposal.chain([token], q), logits, 1.0, rng)
        counts[token if path else nxt] += 1
    chi2 = stats.chisquare(counts, p[0].numpy() * n)
    assert chi2.pvalue > 1e-3, (counts / n, chi2)


def _exact_marginals(target_model, target_prompt, steps=3):
    """Exact distribution of the first `steps` tokens under the target (temperature 1)."""
    dec = Decoder(target_model)
    first = torch.softmax(dec.prefill(target_prompt).logits[0].float(), -1)
    base = dec.length
    second = torch.zeros_like(first)
    for t1 in range(first.shape[0]):
        dec.truncate(base)
        second += first[t1] * torch.softmax(dec.extend([t1]).logits[0, -1].float(), -1)
    return first, second


@pytest.mark.parametrize("views, policy, n", [("M", "static", 3000), ("MT", "random", 2000)])
def test_speculative_sampling_draws_from_the_target(
    processor, target_model, draft_model, views, policy, n
):
    """Chi-square on the second emitted token (the first drafted one) over many seeds.

    For the ensemble, random per-block weights make the mixture q an arbitrary one.
    """
    target_prompt, draft_prompts = prompts(processor, target_model, draft_model)
    _, second = _exact_marginals(target_model, target_prompt)
    vocab = draft_model.get_output_embeddings().out_features
    target = Decoder(target_model)
    drafter = ModelDrafter(Decoder(draft_model), 1.0, make_policy({"weights": policy}, vocab))
    counts = np.zeros(second.shape[0])
    accepted = 0
    for seed in range(n):
        g = torch.Generator().manual_seed(seed)
        out = decode_speculative(
            target,
            target_prompt,
            drafter,
            [draft_prompts[v] for v in views],
            ChainPolicy(3),
            accept_sampling,
            2,
            set(),
            1.0,
            g,
        )
        counts[out.tokens[1]] += 1
        accepted += out.steps[0].accepted > 0
    probs = second.double().numpy()
    expected = probs / probs.sum() * n
    keep = expected >= 5  # pool rare tokens so the chi-square approximation holds
    observed, expected = counts[keep], expected[keep]
    rare = expected_rare = 0.0
    if (~keep).any():
        rare, expected_rare = counts[~keep].sum(), (probs / probs.sum() * n)[~keep].sum()
    if expected_rare > 0:
        observed, expected = np.append(observed, rare), np.append(expected, expected_rare)
    else:
        assert rare == 0, "a token the target never emits was emitted"
    expected *= observed.sum() / expected.sum()  # exact totals in float64 (scipy checks them)
    chi2 = stats.chisquare(observed, expected)
    assert chi2.pvalue > 1e-3, chi2
    assert 0 < accepted < n  # both acceptance and rejection paths were exercised
