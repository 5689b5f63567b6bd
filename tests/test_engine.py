"""The decoding engine: speculative decoding is lossless, token for token and in distribution."""

from __future__ import annotations

import copy

import pytest
import torch
from component_parts import part

from mmspec.decoding import catalog, weights
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.enumeration import Forker, outcomes
from mmspec.decoding.kv_cache import GrowingLayer
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.sampler import seeded
from mmspec.decoding.trees import ChainPolicy
from mmspec.decoding.views import FullView, ImageInput, ViewContext
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
    target = FullView().build(PROMPT, _images(target_model, g), t_ctx)
    d_ctx = ViewContext(
        tok, draft_model.get_input_embeddings(), "<image>", projector_of(draft_model)
    )
    d_img = _images(draft_model, g)
    return target.embeds, {
        v: part("view", v, keep=0.25).build().build(PROMPT, d_img, d_ctx).embeds for v in views
    }


def _greedy_pair(
    processor, target_model, draft_model, views, gamma, seed, policy="static", window=0
):
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, draft_prompts = prompts(processor, target_model, draft_model, seed)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    if isinstance(policy, str):
        vocab = draft_model.get_output_embeddings().out_features
        policy = part("weights", policy, window=window).build(vocab_size=vocab)
    drafter = ModelDrafter(Decoder(draft_model), 0.0, policy)
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
        seeded(seed),
    )
    return ar, sd


@pytest.mark.parametrize("view", ["M", "T"])
@pytest.mark.parametrize("gamma", [1, 3, 5, 7])
def test_greedy_speculative_equals_ar_token_for_token(
    processor, target_model, near_draft_model, view, gamma
):
    counts = []
    for seed in range(3):
        ar, sd = _greedy_pair(processor, target_model, near_draft_model, view, gamma, seed)
        assert sd.tokens == ar.tokens
        counts += [(s.accepted, s.drafted) for s in sd.steps]
        assert all(0 <= s.accepted <= s.drafted <= gamma for s in sd.steps)
        # a chain shorter than gamma only when max_new (40) leaves less room
        emitted = 1
        for step in sd.steps:
            assert step.drafted == min(gamma, 40 - emitted)
            emitted += step.accepted + 1
        # every step emits accepted + 1 tokens (the last step may be cut at max_new / stop)
        assert 1 + sum(s.accepted + 1 for s in sd.steps) >= len(sd.tokens)
    _check_accepts_and_rejects(counts)


def _check_accepts_and_rejects(counts: list[tuple[int, int]]) -> None:
    """Equal tokens prove nothing when the draft never matched: the steps (accepted, drafted)
    must accept some drafted tokens and reject others."""
    accepted, drafted = sum(a for a, _ in counts), sum(d for _, d in counts)
    assert 0 < accepted < drafted, (accepted, drafted)


@pytest.mark.parametrize("view", ["C", "P", "U"])
def test_every_view_is_lossless(processor, target_model, near_draft_model, view):
    counts = []
    for seed in range(2):
        ar, sd = _greedy_pair(processor, target_model, near_draft_model, view, 3, seed)
        assert sd.tokens == ar.tokens
        counts += [(s.accepted, s.drafted) for s in sd.steps]
    _check_accepts_and_rejects(counts)


@pytest.mark.parametrize("policy", list(catalog.components("weights")))
@pytest.mark.parametrize("views", ["MT", "MTCP", "TU"])
def test_ensembles_are_lossless_under_every_policy(
    processor, target_model, near_draft_model, policy, views
):
    counts = []
    for seed, window in [(0, 0), (1, 1), (2, 4)]:
        ar, sd = _greedy_pair(
            processor, target_model, near_draft_model, views, 3, seed, policy, window
        )
        assert sd.tokens == ar.tokens
        counts += [(s.accepted, s.drafted) for s in sd.steps]
        for step in sd.steps:
            assert len(step.weights) == len(views)
            assert abs(sum(step.weights) - 1) < 1e-5
            # AdaBoost's weights are not clipped (TABED's release); the others never go below 0
            assert policy == "adaboost" or min(step.weights) >= 0
    _check_accepts_and_rejects(counts)


class _NegativeWeights(weights.Policy):
    """Weights of both signs, as TABED's unclipped AdaBoost gives them."""

    def choose(self, history, m, sampler):
        return torch.tensor([1.5, -0.5])


def test_greedy_drafting_with_a_negative_weight_equals_ar(processor, target_model, draft_model):
    """The mixture's negative mass is cut (weights.mix): the draft changes, the output does not."""
    for seed in range(2):
        ar, sd = _greedy_pair(
            processor, target_model, draft_model, "MT", 3, seed, _NegativeWeights()
        )
        assert sd.tokens == ar.tokens
        assert all(step.weights == (1.5, -0.5) for step in sd.steps)


def test_sampling_from_a_mixture_with_a_negative_weight_is_exactly_the_target():
    """A mixture whose negative weight would leave negative mass (cut by weights.mix) is a
    distribution: drafting from it and verifying by the sampling rule gives exactly p."""
    # the target at the root, then after the drafted token (for the bonus)
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.2] * 5], dtype=torch.float64)
    views = torch.tensor(
        [[[0.1, 0.1, 0.2, 0.3, 0.3]], [[0.4, 0.0, 0.2, 0.2, 0.2]]], dtype=torch.float64
    )
    q = weights.mix(torch.tensor([1.5, -0.5]), views)  # 1.5 q_0 - 0.5 q_1 < 0 at token 0
    assert q[0, 0] == 0 and (q >= 0).all()
    rule = part("acceptance", "sampling").build()

    def first_token(sampler):
        token = sampler.categorical(q[0])
        path, nxt = rule(Proposal.chain([token], q), p.log(), 1.0, sampler)
        return token if path else nxt

    got = torch.zeros(5, dtype=torch.float64)
    for prob, token in outcomes(first_token):
        got[token] += prob
    torch.testing.assert_close(got, p[0], atol=1e-12, rtol=0)


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


def test_self_drafting_counts_only_emitted_tokens(processor, target_model):
    """max_new cuts the last step: its accepted count and tau count only emitted tokens, and
    no proposal is deeper than the tokens the generation may still emit."""
    target_prompt, _ = prompts(processor, target_model, target_model)
    drafter = ModelDrafter(Decoder(target_model), 0.0)
    sd = decode_speculative(
        Decoder(target_model), target_prompt, drafter, [target_prompt], ChainPolicy(4),
        accept_greedy, 29, set(), 0.0, None,
    )  # fmt: skip
    assert len(sd.tokens) == 29
    # 5 full steps of 5 tokens, then room for 3: a chain of 3 drafted, all 3 emitted, no bonus
    assert [s.drafted for s in sd.steps] == [4] * 5 + [3]
    assert [s.accepted for s in sd.steps] == [4] * 5 + [3]
    emitted = sum(s.accepted for s in sd.steps) + 5  # bonus tokens of the full steps
    assert emitted == len(sd.tokens) - 1  # new_tokens: all but the prefill's


def test_sampling_rule_is_exactly_the_target_distribution():
    """Whatever q proposes (a chain drawn from q, or deterministic tree nodes verified as point
    masses), the first emitted token is distributed exactly as p: every outcome enumerated."""
    p = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05], [0.2, 0.2, 0.2, 0.2, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.05, 0.1, 0.15, 0.2, 0.5]], dtype=torch.float64)
    rule = part("acceptance", "sampling").build()

    def first_token(sampler):
        token = sampler.categorical(q[0])
        path, nxt = rule(Proposal.chain([token], q), p.log(), 1.0, sampler)
        return token if path else nxt

    def from_tree(sampler, tokens=(4, 3, 4, 0)):  # siblings chosen without q; one repeated
        rows = torch.cat([p[:1], p[1:].expand(len(tokens), -1)]).log()  # root, then each node
        path, nxt = rule(Proposal(list(tokens), [-1] * len(tokens)), rows, 1.0, sampler)
        return tokens[path[0]] if path else nxt

    for run in (first_token, from_tree):
        got = torch.zeros(5, dtype=torch.float64)
        for prob, token in outcomes(run):
            got[token] += prob
        torch.testing.assert_close(got, p[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("view_first", [False, True])
def test_forked_state_is_independent_and_keeps_its_views_aliased(view_first):
    """The enumeration's forks copy plain tensors by clone(): a copy must not write through to
    the original, a view and its base must stay one storage in the copy (whichever is met first),
    shared model parameters stay shared, and deepcopy is itself again afterwards."""
    model = torch.nn.Linear(2, 2)
    cache = torch.zeros(4, 3)
    view = cache[1:3]
    state = {"model": model, "tensors": [view, cache] if view_first else [cache, view]}
    forked = Forker([model])(state)
    new_view, new_cache = forked["tensors"] if view_first else forked["tensors"][::-1]
    new_cache[1, 0] = 7.0
    assert new_view[0, 0] == 7.0  # still one storage
    assert cache[1, 0] == 0.0 and view[0, 0] == 0.0  # the original untouched
    assert forked["model"] is model
    assert copy._deepcopy_dispatch.get(torch.Tensor) is None


@pytest.mark.parametrize(
    "hparams",
    [
        {"gamma": 1},
        {"views": "MT", "weights": "random"},
        {"views": "TU", "weights": "kld", "window": 1},
    ],
)
def test_speculative_sampling_is_exactly_the_target(hparams):
    """The first three tokens of chain SD at temperature 1 on tiny float64 models, every draw and
    acceptance outcome enumerated, are distributed exactly as the target's."""
    from mmspec.methods.verify import verify_method

    verdict = verify_method("sd", hparams, seed=3)
    assert verdict.tvd < 1e-9 and verdict.greedy_equal
    assert verdict.outcomes == 2 * 8**3  # two prompts; every 3-token sequence is possible


def test_a_copied_cache_layer_grows_apart_from_its_original():
    """GrowingLayer's deepcopy (every fork of exact enumeration): the copy holds the same
    positions on buffers of its own, and appends or crops on either leave the other as it was."""
    g = torch.Generator().manual_seed(0)
    layer = GrowingLayer()
    assert copy.deepcopy(layer).keys is None  # not yet initialised
    layer.update(torch.randn(1, 2, 5, 4, generator=g), torch.randn(1, 2, 5, 4, generator=g))
    keys, values = layer.keys.clone(), layer.values.clone()
    twin = copy.deepcopy(layer)
    assert torch.equal(twin.keys, keys) and torch.equal(twin.values, values)
    assert twin.buffer_k.data_ptr() != layer.buffer_k.data_ptr()
    twin.crop(-2)
    twin.update(torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4))
    assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
    assert torch.equal(twin.keys[..., :3, :], keys[..., :3, :]) and twin.keys.shape[-2] == 6
    assert twin.keys.data_ptr() == twin.buffer_k.data_ptr()  # a view on its own buffer


def test_a_prefill_leaves_room_to_decode_without_doubling_its_cache():
    """A long prompt's first allocation leaves a quarter more (at least FIRST_ROOM positions),
    not twice its length; growing past it keeps every position written so far."""
    from mmspec.decoding.kv_cache import FIRST_ROOM

    g = torch.Generator().manual_seed(1)
    for prompt in (5, 4000):
        layer = GrowingLayer()
        layer.update(torch.randn(1, 1, prompt, 2, generator=g), torch.zeros(1, 1, prompt, 2))
        capacity = layer.buffer_k.shape[-2]
        assert capacity == prompt + max(FIRST_ROOM, prompt // 4) < 2 * prompt + FIRST_ROOM
        start = layer.buffer_k.data_ptr()
        written = layer.keys.clone()
        for _ in range(capacity - prompt):  # decode steps that fit: no copy
            layer.update(torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2))
        assert layer.buffer_k.data_ptr() == start
        layer.update(torch.full((1, 1, 1, 2), 2.0), torch.ones(1, 1, 1, 2))  # one past: a copy
        assert layer.buffer_k.shape[-2] == 2 * capacity
        assert torch.equal(layer.keys[..., :prompt, :], written)
        assert layer.keys.shape[-2] == capacity + 1 and layer.keys[0, 0, -1, 0] == 2.0
