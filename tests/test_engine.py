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
from mmspec.decoding.views import FullView, TextOnlyView

PROMPT = "<bos> user : <image> describe the image . assistant :"


def prompts(processor, target_model, draft_model, seed=0):
    """Target (view M) and draft (M and T) prompt embeddings with random 'cached' features."""
    tok = processor.tokenizer
    g = torch.Generator().manual_seed(seed)
    t_img = [torch.randn(16, target_model.config.text_config.hidden_size, generator=g)]
    d_img = [torch.randn(16, draft_model.config.text_config.hidden_size, generator=g)]
    target = FullView().build(PROMPT, t_img, tok, target_model.get_input_embeddings(), "<image>")
    draft_m = FullView().build(PROMPT, d_img, tok, draft_model.get_input_embeddings(), "<image>")
    draft_t = TextOnlyView().build(PROMPT, [], tok, draft_model.get_input_embeddings(), "<image>")
    return target.embeds, {"M": draft_m.embeds, "T": draft_t.embeds}


@pytest.mark.parametrize("view", ["M", "T"])
@pytest.mark.parametrize("gamma", [1, 3, 5, 7])
def test_greedy_speculative_equals_ar_token_for_token(processor, target_model, draft_model,
                                                      view, gamma):
    stop = {processor.tokenizer.eos_token_id}
    for seed in range(3):
        target_prompt, draft_prompts = prompts(processor, target_model, draft_model, seed)
        ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
        drafter = ModelDrafter(Decoder(draft_model), 0.0)
        sd = decode_speculative(Decoder(target_model), target_prompt, drafter,
                                draft_prompts[view], ChainPolicy(gamma), accept_greedy,
                                40, stop, 0.0, None)
        assert sd.tokens == ar.tokens
        assert all(0 <= s.accepted <= s.drafted == gamma for s in sd.steps)
        # every step emits accepted + 1 tokens (the last step may be cut at max_new / stop)
        assert 1 + sum(s.accepted + 1 for s in sd.steps) >= len(sd.tokens)


def test_self_drafting_accepts_everything(processor, target_model):
    """With the target as its own draft, every greedy proposal is accepted in full."""
    stop = set()  # decode exactly max_new tokens
    target_prompt, _ = prompts(processor, target_model, target_model)
    drafter = ModelDrafter(Decoder(target_model), 0.0)
    sd = decode_speculative(Decoder(target_model), target_prompt, drafter, target_prompt,
                            ChainPolicy(4), accept_greedy, 31, stop, 0.0, None)
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
    first = torch.softmax(dec.prefill(target_prompt).logits[-1].float(), -1)
    base = dec.length
    second = torch.zeros_like(first)
    for t1 in range(first.shape[0]):
        dec.truncate(base)
        second += first[t1] * torch.softmax(dec.extend([t1]).logits[-1].float(), -1)
    return first, second


def test_speculative_sampling_draws_from_the_target(processor, target_model, draft_model):
    """Chi-square on the second emitted token (the first drafted one) over many seeds."""
    target_prompt, draft_prompts = prompts(processor, target_model, draft_model)
    _, second = _exact_marginals(target_model, target_prompt)
    target, drafter = Decoder(target_model), ModelDrafter(Decoder(draft_model), 1.0)
    counts = np.zeros(second.shape[0])
    n = 3000
    accepted = 0
    for seed in range(n):
        g = torch.Generator().manual_seed(seed)
        out = decode_speculative(target, target_prompt, drafter, draft_prompts["M"],
                                 ChainPolicy(3), accept_sampling, 2, set(), 1.0, g)
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
