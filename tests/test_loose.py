"""Loose verification (LVSpec, PST, FLy, FLy's gate, random relaxation): the lossless rule draw
for draw when nothing may be relaxed, each rule's relaxation on hand-built cases, the engine
around them (real tiny models, chains and trees), and their spec keys."""

from __future__ import annotations

import pytest
import torch
from component_parts import part
from test_engine import PROMPT, _images, prompts
from test_lantern import _tree

from mmspec.decoding.acceptance import loose
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.enumeration import outcomes
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.prompt import Prompt
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.sampler import seeded
from mmspec.decoding.trees import ChainPolicy, StaticTree
from mmspec.decoding.views import FullView, ViewContext
from mmspec.methods.components import is_lossless
from mmspec.methods.registry import resolve

VOCAB, HIDDEN = 12, 6


def _case(seed: int, n: int = 4):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n + 1, VOCAB, generator=g) * 2
    q = torch.softmax(torch.randn(n, VOCAB, generator=g) * 2, -1)
    tokens = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(n)]
    hidden = torch.randn(n, HIDDEN, generator=g)
    visual = torch.randn(7, HIDDEN, generator=g)
    return logits, q, tokens, hidden, visual


def _rule(name: str, **params):
    return part("acceptance", name, **params).build()


LOSSLESS_SETTINGS = [
    ("lvspec", {"lvspec_lambda": 0.0, "lvspec_n": 3, "pst": False}),
    ("random_relax", {"relax_rho": 0.0}),
]


@pytest.mark.parametrize("name, params", LOSSLESS_SETTINGS)
def test_nothing_to_relax_decides_draw_for_draw_as_the_lossless_rules(name, params):
    rule = _rule(name, **params)
    assert is_lossless(name, params)
    for seed in range(40):
        logits, q, tokens, hidden, visual = _case(seed)
        states = {"hidden": hidden, "visual": visual} if name == "lvspec" else {}
        for proposal in (Proposal.chain(tokens, q), _tree(tokens)):
            for temperature in (0.7, 1.0):
                got = rule.verdict(proposal, logits, temperature, seeded(seed), **states)
                want = accept_sampling(proposal, logits, temperature, seeded(seed))
                assert got == (*want, 0), (seed, temperature)
            got = rule.verdict(proposal, logits, 0.0, seeded(seed), **states)
            assert got == (*accept_greedy(proposal, logits, 0.0, None), 0)


def _greedy_logits(wanted: list[int], spread: list[float] | None = None) -> torch.Tensor:
    """Rows whose argmax is `wanted[i]`; `spread[i]` > 0 flattens row i (high entropy)."""
    logits = torch.full((len(wanted), VOCAB), -12.0)
    for i, token in enumerate(wanted):
        flat = (spread or [0.0] * len(wanted))[i]
        logits[i, :] = -12.0 + flat * 11.5  # flat rows: every token close to the argmax
        logits[i, token] = 0.0
    return logits


def _states(relevance: list[float]):
    """Hidden states whose relevance to the one visual state is `relevance` (cosines)."""
    visual = torch.zeros(1, 2)
    visual[0, 0] = 1.0
    angles = torch.tensor(relevance).clamp(-1, 1).acos()
    hidden = torch.stack([angles.cos(), angles.sin()], dim=-1)
    return {"hidden": hidden, "visual": visual}


def test_lvspec_relaxes_the_least_relevant_positions_only():
    # drafted 1 2 3 4; the target wants 1 9 3 8: mismatches at positions 1 and 3
    chain = Proposal.chain([1, 2, 3, 4])
    logits = _greedy_logits([1, 9, 3, 8, 5])
    low_at_1 = _states([0.9, 0.1, 0.8, 0.7])  # position 1 least relevant
    rule = _rule("lvspec", lvspec_lambda=0.25, lvspec_n=1, pst=False)  # floor(0.25 * 4) = 1
    assert rule.verdict(chain, logits, 0.0, None, **low_at_1) == ([0, 1, 2], 8, 1)
    low_at_0 = _states([0.1, 0.9, 0.8, 0.7])  # the loosened position matches anyway
    assert rule.verdict(chain, logits, 0.0, None, **low_at_0) == ([0], 9, 0)
    both = _rule("lvspec", lvspec_lambda=0.5, lvspec_n=1, pst=False)
    assert both.verdict(chain, logits, 0.0, None, **_states([0.9, 0.1, 0.8, 0.2])) == (
        [0, 1, 2, 3],
        5,
        2,
    )
    exact = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=1, pst=False)
    assert exact.verdict(chain, logits, 0.0, None, **low_at_1) == ([0], 9, 0)


def test_pst_accepts_a_target_token_found_among_the_drafts():
    chain = Proposal.chain([1, 2, 3, 4])
    rule = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=1, pst=True)
    states = _states([0.9, 0.1, 0.8, 0.7])
    # the target wants 4 at position 1: drafted at position 3, so a shift; 9 never was
    assert rule.verdict(chain, _greedy_logits([1, 4, 3, 9, 5]), 0.0, None, **states) == (
        [0, 1, 2],
        9,
        1,
    )
    assert not is_lossless("lvspec", {"lvspec_lambda": 0.0, "pst": True})


def test_pst_range_and_pst_ahead_bound_the_shifts_it_tolerates():
    # the target wants 4 at position 1, which the draft wrote two positions on
    chain = Proposal.chain([1, 2, 3, 4])
    logits = _greedy_logits([1, 4, 3, 9, 5])
    states = _states([0.9, 0.1, 0.8, 0.7])
    for pst_range, want in [(1, ([0], 4, 0)), (2, ([0, 1, 2], 9, 1)), (None, ([0, 1, 2], 9, 1))]:
        rule = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=1, pst=True, pst_range=pst_range)
        assert rule.verdict(chain, logits, 0.0, None, **states) == want, pst_range
    # in a tree the range counts depths: 4 drafted at depth 2 of another branch is one away
    tree = Proposal([1, 7, 2, 4], [ROOT, ROOT, 0, 1])  # 1 -> 2, 7 -> 4; the target wants 1, 4
    near = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=1, pst=True, pst_range=1)
    assert near.verdict(tree, _greedy_logits([1, 4, 9, 8, 9]), 0.0, None, **states) == (
        [0, 2],
        8,
        1,
    )
    # ahead only: the target's 2 at position 3 was drafted before it, so it is not a shift
    back = _greedy_logits([1, 2, 3, 2, 5])
    for pst_ahead, want in [(False, ([0, 1, 2, 3], 5, 1)), (True, ([0, 1, 2], 2, 0))]:
        rule = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=1, pst=True, pst_ahead=pst_ahead)
        assert rule.verdict(chain, back, 0.0, None, **states) == want, pst_ahead
        assert rule.verdict(chain, logits, 0.0, None, **states) == ([0, 1, 2], 9, 1)
    ahead_near = _rule("lvspec", lvspec_lambda=0, lvspec_n=1, pst=True, pst_ahead=True, pst_range=1)
    assert ahead_near.verdict(chain, logits, 0.0, None, **states) == ([0], 4, 0)
    with pytest.raises(ValueError, match="pst_range is PST's tolerable shift"):
        resolve("lvspec", {"pst_range": 0})
    with pytest.raises(ValueError, match="pst_range=1.5 should be an integer"):
        resolve("lvspec", {"pst_range": 1.5})
    assert resolve("lvspec", {}).params["pst_range"] is None  # the paper's: the whole step


def test_visual_relevance_is_the_mean_of_the_top_n_cosines():
    g = torch.Generator().manual_seed(0)
    hidden, visual = torch.randn(5, 8, generator=g), torch.randn(9, 8, generator=g)
    got = loose.visual_relevance(hidden, visual, 3)
    for i in range(5):
        cos = sorted(
            (float(torch.cosine_similarity(hidden[i], v, dim=0)) for v in visual), reverse=True
        )
        assert abs(float(got[i]) - sum(cos[:3]) / 3) < 1e-5
    assert torch.allclose(
        loose.visual_relevance(hidden, visual, 50), loose.visual_relevance(hidden, visual, 9)
    )  # N beyond the visual tokens: all of them
    assert loose.loosened(torch.tensor([0.5, 0.1, 0.9, 0.1, 0.3]), 0.7) == {1, 3, 4}
    assert loose.loosened(torch.tensor([0.5, 0.1]), 0.0) == set()


def test_fly_needs_high_entropy_a_matching_window_and_a_drafted_position_after_it():
    chain = Proposal.chain([1, 2, 3, 4, 5])
    fly = _rule("fly", fly_entropy=0.3, fly_window=4)
    # a mismatch at position 0, then four matches: the window (0-3) and position 4 after it
    first = [9, 2, 3, 4, 5, 6]
    flat_at_0 = _greedy_logits(first, [1, 0, 0, 0, 0, 0])
    entropy = loose.top_entropy(flat_at_0)
    assert float(entropy[0]) > 0.5 and float(entropy[1]) < 0.05
    assert fly.verdict(chain, flat_at_0, 0.0, None) == ([0, 1, 2, 3, 4], 6, 1)
    assert fly.verdict(chain, _greedy_logits(first), 0.0, None) == ([], 9, 0)  # the gate holds
    # FLy.py:1109 undoes relaxations in the last window positions (1-4 here): a mismatch at
    # position 1 with matches to the end stays a rejection, 1 9 and not 1 2 3 4 5 6
    wanted = [1, 9, 3, 4, 5, 6]
    flat_at_1 = _greedy_logits(wanted, [0, 1, 0, 0, 0, 0])
    assert float(loose.top_entropy(flat_at_1)[1]) >= 0.3
    assert fly.verdict(chain, flat_at_1, 0.0, None) == ([0], 9, 0)
    assert _rule("fly", fly_entropy=0.3, fly_window=3).verdict(chain, flat_at_1, 0.0, None) == (
        [0, 1, 2, 3, 4],
        6,
        1,
    )
    # a second mismatch inside the window blocks the first; the gate alone passes both
    wanted2 = [1, 9, 3, 8, 5, 6]
    flat2 = _greedy_logits(wanted2, [0, 1, 0, 1, 0, 0])
    assert _rule("fly", fly_entropy=0.3, fly_window=3).verdict(chain, flat2, 0.0, None) == (
        [0],
        9,
        0,
    )
    # window 2 relaxes position 1 (2 matches) but not position 3, in the last two positions
    assert _rule("fly", fly_entropy=0.3, fly_window=2).verdict(chain, flat2, 0.0, None) == (
        [0, 1, 2],
        8,
        1,
    )
    gate = _rule("fly_gate", fly_entropy=0.3)
    assert gate.verdict(chain, flat2, 0.0, None) == ([0, 1, 2, 3, 4], 6, 2)


def test_fly_at_window_one_never_relaxes_the_last_position_and_the_gate_alone_does():
    chain = Proposal.chain([1, 2, 3, 4, 5])
    last = _greedy_logits([1, 2, 3, 4, 9, 6], [0, 0, 0, 0, 1, 0])
    one = _rule("fly", fly_entropy=0.3, fly_window=1)
    gate = _rule("fly_gate", fly_entropy=0.3)
    assert one.verdict(chain, last, 0.0, None) == ([0, 1, 2, 3], 9, 0)
    assert gate.verdict(chain, last, 0.0, None) == ([0, 1, 2, 3, 4], 6, 1)
    before = _greedy_logits([1, 2, 3, 9, 5, 6], [0, 0, 0, 1, 0, 0])
    assert one.verdict(chain, before, 0.0, None) == gate.verdict(chain, before, 0.0, None)
    assert one.verdict(chain, before, 0.0, None) == ([0, 1, 2, 3, 4], 6, 1)


def test_fly_end_mask_counts_the_proposals_deepest_level():
    # 1 -> 2 -> 3 and 7 -> 8 -> 9 -> 10: the release pads every path to the longest and masks
    # its last window columns (FLy.py:834), so the 1-branch's mismatch at depth 1 is relaxed
    # with window 3 in this tree (1 + 3 <= 4) and not on the 1 2 3 chain alone (1 + 3 > 3)
    tree = Proposal([1, 7, 2, 8, 3, 9, 10], [ROOT, ROOT, 0, 1, 2, 3, 5])
    wanted = [5, 2, 0, 3, 0, 4, 0, 0]  # rows: root, then each node's next
    logits = _greedy_logits(wanted, [1, 0, 0, 0, 0, 0, 0, 0])
    fly = _rule("fly", fly_entropy=0.3, fly_window=3)
    assert fly.verdict(tree, logits, 0.0, None) == ([0, 2, 4], 4, 1)
    chain = Proposal.chain([1, 2, 3])
    assert fly.verdict(chain, logits[[0, 1, 3, 5]], 0.0, None) == ([], 5, 0)


def test_fly_gate_is_off_at_thresholds_up_to_one_hundredth():
    chain = Proposal.chain([1, 2, 3, 4, 5])
    sharp = _greedy_logits([9, 2, 3, 4, 5, 6])
    assert float(loose.top_entropy(sharp)[0]) < 0.001
    for name, extra in [("fly", {"fly_window": 2}), ("fly_gate", {})]:
        for threshold in (0.005, 0.01):  # FLy.py:83: no gate, the window alone decides
            rule = _rule(name, fly_entropy=threshold, **extra)
            assert rule.verdict(chain, sharp, 0.0, None) == ([0, 1, 2, 3, 4], 6, 1)
        closed = _rule(name, fly_entropy=0.0101, **extra)
        assert closed.verdict(chain, sharp, 0.0, None) == ([], 9, 0)


def _entropy_as_the_release(logits: torch.Tensor) -> torch.Tensor:
    """FLy.py:358-371: top-3 entropy of log_softmax(logits), every step in the logits' dtype."""
    top = torch.nn.functional.log_softmax(logits, dim=-1).topk(3, dim=-1).values
    return -(top.exp() * top).sum(-1)


def test_fly_entropy_is_computed_in_the_logits_dtype():
    row = [-0.92578125, 0.7734375, 1.234375, -0.76953125, -0.9921875, 1.6953125, 0.11572265625]
    row += [-0.921875, 1.0234375, -1.1171875, 0.73046875, -0.0439453125]  # exact in bf16
    logits = torch.tensor([row, row], dtype=torch.bfloat16)
    threshold = 0.935
    bf16, fp32 = _entropy_as_the_release(logits[0]), _entropy_as_the_release(logits[0].float())
    assert not bool(bf16 < threshold) and bool(fp32 < threshold)  # bf16 flips the gate here
    assert torch.equal(loose.top_entropy(logits), _entropy_as_the_release(logits))
    draft = int(logits[0].float().topk(2).indices[1])  # not the argmax: a mismatch
    gate = _rule("fly_gate", fly_entropy=threshold)
    assert gate.verdict(Proposal.chain([draft]), logits, 0.0, None)[::2] == ([0], 1)
    assert gate.verdict(Proposal.chain([draft]), logits.float(), 0.0, None)[::2] == ([], 0)


@pytest.mark.parametrize("name", ["fly", "fly_gate"])
def test_fly_at_temperature_accepts_a_draft_equal_to_either_of_two_target_draws(name):
    """FLy.py:129-146: at temperature > 0 two draws from the target per position; a drafted
    token equal to either is accepted, else the first draw is emitted. With the gate closed:
    P(accept x) = 1 - (1 - p(x))^2, P(reject, emit t) = p(t) (1 - p(x)); q is not read."""
    logits, q, tokens, _, _ = _case(2, n=1)
    logits, q = logits.double(), q.double()
    p = torch.softmax(logits[0] / 0.7, -1)
    x = tokens[0]
    extra = {"fly_window": 2} if name == "fly" else {}
    rule = _rule(name, fly_entropy=50.0, **extra)  # the gate never opens
    chain = Proposal.chain([x], q)
    accepted, emitted = 0.0, {}
    for prob, (path, token, relaxed) in outcomes(lambda s: rule.verdict(chain, logits, 0.7, s)):
        assert relaxed == 0
        if path:
            accepted += prob
        else:
            emitted[token] = emitted.get(token, 0.0) + prob
    px = float(p[x])
    assert abs(accepted - (1 - (1 - px) ** 2)) < 1e-9
    assert x not in emitted
    for t, prob in emitted.items():
        assert abs(prob - float(p[t]) * (1 - px)) < 1e-9, t
    # seeded: the same draws again, and the draft's q changes nothing
    other = Proposal.chain([x], torch.softmax(torch.randn_like(q), -1))
    for seed in range(20):
        once = rule.verdict(chain, logits, 0.7, seeded(seed))
        assert once == rule.verdict(chain, logits, 0.7, seeded(seed))
        assert once == rule.verdict(other, logits, 0.7, seeded(seed))


def test_random_relaxation_at_one_accepts_every_draft_and_at_zero_none():
    chain = Proposal.chain([1, 2, 3, 4])
    logits = _greedy_logits([7, 8, 9, 10, 11])
    assert _rule("random_relax", relax_rho=1.0).verdict(chain, logits, 0.0, seeded(0)) == (
        [0, 1, 2, 3],
        11,
        4,
    )
    assert _rule("random_relax", relax_rho=0.0).verdict(chain, logits, 0.0, seeded(0)) == (
        [],
        7,
        0,
    )
    halves = [
        _rule("random_relax", relax_rho=0.5).verdict(chain, logits, 0.0, seeded(s))[2]
        for s in range(200)
    ]
    assert 0.6 < sum(halves) / len(halves) < 1.4  # E[relaxed] = 0.5 + 0.25 + ... ~ 0.94


def test_relaxed_trees_descend_into_the_first_child():
    tree = _tree([1, 2, 3, 4])  # 0: 1 (children 2: 3, 3: 4), 1: 2
    logits = _greedy_logits([7, 8, 9, 10, 11])
    path, token, relaxed = _rule("random_relax", relax_rho=1.0).verdict(
        tree, logits, 0.0, seeded(0)
    )
    assert (path, relaxed) == ([0, 2], 2) and token == int(logits[3].argmax())


def _model_prompt(processor, target_model, draft_model, seed):
    """The engine test's prompt as a `Prompt` (its image positions marked visual), and the
    draft's prompt in view M."""
    g = torch.Generator().manual_seed(seed)
    tok = processor.tokenizer
    t_ctx = ViewContext(tok, target_model.get_input_embeddings(), "<image>")
    target = FullView().build(PROMPT, _images(target_model, g), t_ctx)
    d_ctx = ViewContext(tok, draft_model.get_input_embeddings(), "<image>")
    draft = FullView().build(PROMPT, _images(draft_model, g), d_ctx)
    assert target.n_visual > 0
    return target, draft.embeds


def _decode(processor, target_model, draft_model, rule, policy, temperature, seed):
    stop = {processor.tokenizer.eos_token_id}
    prompt, draft_prompt = _model_prompt(processor, target_model, draft_model, seed)
    drafter = ModelDrafter(Decoder(draft_model), temperature)  # one view: no weights
    out = decode_speculative(
        Decoder(target_model),
        prompt,
        drafter,
        [draft_prompt],
        policy,
        rule,
        40,
        stop,
        temperature,
        seeded(seed),
    )
    return prompt, out


def test_lvspec_at_lambda_zero_is_ar_token_for_token_and_loosening_accepts_more(
    processor, target_model, draft_model
):
    exact = _rule("lvspec", lvspec_lambda=0.0, lvspec_n=10, pst=False)
    loosest = _rule("lvspec", lvspec_lambda=1.0, lvspec_n=10, pst=False)
    stop = {processor.tokenizer.eos_token_id}
    for seed in range(3):
        prompt, out = _decode(processor, target_model, draft_model, exact, ChainPolicy(5), 0, seed)
        ar = decode_ar(Decoder(target_model), prompt, 40, stop, 0.0, None)
        assert out.tokens == ar.tokens
        assert all(s.relaxed == 0 for s in out.steps)
        _, relaxed = _decode(processor, target_model, draft_model, loosest, ChainPolicy(5), 0, seed)
        # lambda 1 loosens every position: every drafted token is accepted
        assert all(s.accepted == s.drafted or s is relaxed.steps[-1] for s in relaxed.steps)
        assert sum(s.relaxed for s in relaxed.steps) > 0


@pytest.mark.parametrize("name", ["lvspec", "fly", "fly_gate", "random_relax"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_loose_rule_runs_on_chains_and_trees(
    processor, target_model, draft_model, name, temperature
):
    rule = resolve(name, {"temperature": temperature}).part("acceptance").build()
    for policy in (ChainPolicy(4), StaticTree([[0], [1], [0, 0], [0, 1], [0, 0, 0]])):
        _, out = _decode(processor, target_model, draft_model, rule, policy, temperature, 1)
        assert 1 <= len(out.tokens) <= 40
        for step in out.steps:
            assert 0 <= step.relaxed <= step.accepted <= step.drafted


def test_lvspec_needs_visual_tokens(processor, target_model, draft_model):
    embeds, draft = prompts(processor, target_model, draft_model, 0, views="M")
    text_only = Prompt(embeds, torch.zeros(embeds.shape[0], dtype=torch.bool))
    drafter = ModelDrafter(Decoder(draft_model), 0.0)
    with pytest.raises(
        ValueError, match="'lvspec' compares drafted tokens with the prompt's visual"
    ):
        decode_speculative(
            Decoder(target_model),
            text_only,
            drafter,
            [draft["M"]],
            ChainPolicy(3),
            _rule("lvspec", lvspec_lambda=0.5, lvspec_n=2, pst=False),
            10,
            set(),
            0.0,
            seeded(0),
        )


def test_registry_rows_and_their_keys():
    spec = resolve("lvspec", {})
    rule = spec.part("acceptance").values
    assert (spec.acceptance, spec.gamma, rule["lvspec_lambda"], rule["lvspec_n"]) == (
        "lvspec",
        10,
        0.7,
        10,
    )
    nopst = resolve("lvspec_nopst", {}).part("acceptance").values
    assert rule["pst"] is True and nopst["pst"] is False
    fly, fly_gate = resolve("fly", {}).params, resolve("fly_gate", {}).params
    assert fly["fly_window"] == 4 and "fly_window" not in fly_gate
    assert not resolve("lvspec", {}).lossless
    assert resolve("lvspec_nopst", {"lvspec_lambda": 0}).lossless
    assert resolve("random_relax", {"relax_rho": 0}).lossless
    assert not resolve("fly_gate", {}).lossless
    # any drafting method verifies loosely by naming the rule (its keys join with defaults)
    tree = resolve("eagle2_tree", {"acceptance": "lvspec", "lvspec_lambda": 0.5})
    assert tree.params["lvspec_n"] == 10 and tree.params["pst"] is True


@pytest.mark.parametrize(
    "method, hparams, message",
    [
        ("lvspec", {"lvspec_lambda": 1.5}, r"lvspec_lambda .* must be in \[0, 1\], got 1.5"),
        ("lvspec", {"lvspec_lambda": -0.1}, r"lvspec_lambda .* must be in \[0, 1\]"),
        ("lvspec", {"lvspec_n": 0}, "lvspec_n .* must be >= 1, got 0"),
        ("lvspec", {"pst": "yes"}, "pst='yes' should be true or false"),
        ("lvspec", {"lvspec_n": True}, "lvspec_n=True should be an integer"),
        ("fly", {"fly_window": 0}, "fly_window .* must be >= 1"),
        ("fly", {"fly_entropy": -1}, "fly_entropy .* must be >= 0"),
        ("random_relax", {"relax_rho": 2}, r"relax_rho .* must be in \[0, 1\]"),
        ("sd", {"lvspec_lambda": 0.5}, "read only by acceptance 'lvspec'"),
        ("fly_gate", {"fly_window": 2}, "read only by acceptance 'fly'"),
    ],
)
def test_bad_loose_hyperparameters_are_named(method, hparams, message):
    with pytest.raises(ValueError, match=message):
        resolve(method, hparams)
