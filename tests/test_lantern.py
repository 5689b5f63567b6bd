"""LANTERN's relaxed acceptance: latent neighbour tables, the relaxed set A_{k,delta}, the rules
(greedy, a chain drawn from q, point-mass trees), lossless at delta 0 draw for draw and by exact
enumeration, and its spec keys."""

from __future__ import annotations

import math

import pytest
import torch

from mmspec.decoding.acceptance import lantern, make_rule
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.decoding.enumeration import outcomes, total_variation
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.sampler import seeded
from mmspec.methods.registry import resolve

OFFSET = 3  # image codes follow three text tokens in the vocabulary


def _codebook(codes: int = 24, dim: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(codes, dim, generator=torch.Generator().manual_seed(seed))


def _neighbours(k: int, proximity: str = "l2", codes: int = 24) -> lantern.Neighbours:
    return lantern.Neighbours(_codebook(codes), OFFSET, k, proximity)


def _rule(k: int, delta: float, divergence: str = "tvd", proximity: str = "l2", codes: int = 24):
    spec = {
        "acceptance": "lantern",
        "lantern_k": k,
        "lantern_delta": delta,
        "proximity": proximity,
        "divergence": divergence,
    }
    return make_rule(spec, codebook=(_codebook(codes), OFFSET))


@pytest.mark.parametrize("proximity", ["l2", "cosine"])
def test_neighbour_tables_equal_brute_force_in_chunks(monkeypatch, proximity):
    monkeypatch.setattr(lantern, "CHUNK", 5)  # several distance blocks
    book = _codebook(23)
    table = lantern.nearest_codes(book, 6, proximity)
    for c in range(23):
        if proximity == "l2":
            far = [float((book[c] - book[o]).norm()) for o in range(23)]
        else:
            far = [-float(torch.cosine_similarity(book[c], book[o], dim=0)) for o in range(23)]
        order = sorted((o for o in range(23) if o != c), key=lambda o: far[o])
        assert table[c].tolist() == order[:6], c


def test_random_neighbours_skip_the_code_and_repeat_with_the_seed():
    book = _codebook(30)
    one, two = (lantern.nearest_codes(book, 8, "random", seed=4) for _ in range(2))
    assert torch.equal(one, two)
    assert not torch.equal(one, lantern.nearest_codes(book, 8, "random", seed=5))
    for c in range(30):
        assert c not in one[c].tolist() and len(set(one[c].tolist())) == 8


def test_neighbours_map_vocabulary_ids_and_reject_bad_k():
    table = _neighbours(4)
    assert table.of(OFFSET - 1) is None and table.of(OFFSET + 24) is None  # text tokens
    assert (table.of(OFFSET + 5) >= OFFSET).all()
    with pytest.raises(ValueError, match=r"lantern_k must be in \[0, 23\]"):
        _neighbours(24)
    with pytest.raises(ValueError, match="unknown proximity"):
        _neighbours(3, "manhattan")


def test_relaxed_set_grows_while_the_moved_mass_stays_within_delta():
    table = _neighbours(5)
    p = torch.softmax(torch.randn(OFFSET + 24, generator=torch.Generator().manual_seed(1)), -1)
    x = OFFSET + 7
    near = table.of(x)
    kept, mass = lantern.relaxed_set(p, x, table, 0.0, "tvd")
    assert kept.tolist() == [x] and float(mass) == float(p[x])
    moved = p[near].cumsum(0)
    for j in range(5):  # a delta exactly at each prefix's moved mass keeps that prefix
        kept, mass = lantern.relaxed_set(p, x, table, float(moved[j]), "tvd")
        assert kept.tolist() == [x, *near[: j + 1].tolist()]
        assert math.isclose(float(mass), float(p[x] + moved[j]), rel_tol=1e-6)
        tvd = 0.5 * (lantern.distorted(p, kept, mass) - p).abs().sum()
        assert float(tvd) <= float(moved[j]) + 1e-6
    # JSD (bits) of the same move is smaller than its TVD: a larger set at the same delta
    by_jsd, _ = lantern.relaxed_set(p, x, table, float(moved[1]), "jsd")
    assert len(by_jsd) >= 3


def _case(seed: int, vocab: int = OFFSET + 24, n: int = 4):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n + 1, vocab, generator=g) * 2
    q = torch.softmax(torch.randn(n, vocab, generator=g) * 2, -1)
    tokens = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(n)]
    return logits, q, tokens


def _tree(tokens: list[int]) -> Proposal:
    tree = Proposal()
    a = tree.add(tokens[0], ROOT)
    tree.add(tokens[1], ROOT)
    tree.add(tokens[2], a)
    tree.add(tokens[3], a)
    return tree


@pytest.mark.parametrize("k, delta", [(0, 0.3), (6, 0.0)])
def test_lossless_settings_decide_draw_for_draw_as_the_lossless_rules(k, delta):
    rule = _rule(k, delta)
    for seed in range(40):
        logits, q, tokens = _case(seed)
        chain = Proposal.chain(tokens, q)
        for temperature in (0.7, 1.0):
            a = rule(chain, logits, temperature, seeded(seed))
            b = accept_sampling(chain, logits, temperature, seeded(seed))
            assert a == b, (seed, temperature)
            tree = _tree(tokens)
            assert rule(tree, logits, temperature, seeded(seed)) == accept_sampling(
                tree, logits, temperature, seeded(seed)
            )
        assert rule(chain, logits, 0.0, None) == accept_greedy(chain, logits, 0.0, None)
        assert rule(_tree(tokens), logits, 0.0, None) == accept_greedy(
            _tree(tokens), logits, 0.0, None
        )


def _first_token_distribution(rule, logits, q, temperature, tree: bool):
    """Exact distribution of the first emitted token: the draft's draw (or a fixed tree of
    point masses) and every coin and residual draw of the rule, enumerated."""

    def run(sampler):
        if tree:
            proposal = Proposal()
            for t in q[0].topk(3).indices.tolist():
                proposal.add(t, ROOT)
        else:
            proposal = Proposal.chain([sampler.categorical(q[0])], q[:1])
        path, token = rule(proposal, logits[: len(proposal.tokens) + 1], temperature, sampler)
        return proposal.tokens[path[0]] if path else token

    dist: dict = {}
    for prob, token in outcomes(run):
        dist[(token,)] = dist.get((token,), 0.0) + prob
    return dist


@pytest.mark.parametrize("tree", [False, True])
def test_exact_output_distribution_is_the_targets_at_delta_zero_and_moves_with_delta(tree):
    logits, q, _ = _case(3)
    logits, q = logits.double(), q.double()
    q = q / q.sum(-1, keepdim=True)  # a distribution in float64, as the enumeration computes
    target = torch.softmax(logits[0], -1)
    exact = {(t,): float(target[t]) for t in range(len(target)) if target[t] > 0}
    lossless = _first_token_distribution(_rule(6, 0.0), logits, q, 1.0, tree)
    assert total_variation(lossless, exact) < 1e-9
    relaxed = _first_token_distribution(_rule(6, 0.4), logits, q, 1.0, tree)
    assert total_variation(relaxed, exact) > 1e-3  # lossy: the relaxation moves mass


def _acceptance_rate(k: int, delta: float, divergence: str = "tvd") -> float:
    """Exact probability that a token drawn from q is accepted, averaged over positions."""
    rule = _rule(k, delta, divergence)
    table = rule.params["neighbours"]
    rates = []
    for seed in range(20):
        logits, q, _ = _case(seed, n=1)
        p = torch.softmax(logits[0].double(), -1)
        rate = 0.0
        for x in range(OFFSET, OFFSET + 24):
            _, mass = lantern.relaxed_set(p, x, table, delta, divergence)
            rate += float(q[0, x]) * min(1.0, float(mass) / float(q[0, x]))
        rates.append(rate)
    return sum(rates) / len(rates)


def test_acceptance_rises_with_delta_and_with_k():
    by_delta = [_acceptance_rate(8, d) for d in (0.0, 0.05, 0.1, 0.2, 0.4)]
    by_k = [_acceptance_rate(k, 0.2) for k in (0, 1, 2, 4, 8)]
    assert by_delta == sorted(by_delta) and by_delta[-1] > by_delta[0] + 0.05
    assert by_k == sorted(by_k) and by_k[-1] > by_k[0] + 0.05
    assert _acceptance_rate(8, 0.2, "jsd") >= _acceptance_rate(8, 0.2, "tvd")


def test_greedy_accepts_a_neighbour_of_the_argmax_once_their_mass_outweighs_it():
    table = _neighbours(3)
    x = OFFSET + 2
    near = table.of(x).tolist()
    logits = torch.full((2, OFFSET + 24), -9.0)
    best = next(t for t in range(OFFSET, OFFSET + 24) if t not in near and t != x)
    logits[0, best], logits[0, x], logits[0, near[0]] = 2.0, 1.6, 1.6
    chain = Proposal.chain([x])
    assert _rule(3, 0.0)(chain, logits, 0.0, None) == ([], best)
    p = torch.softmax(logits[0], -1)
    assert _rule(3, float(p[near[0]]) + 1e-6)(chain, logits, 0.0, None)[0] == [0]


def test_lantern_keys_join_a_method_that_verifies_with_it():
    spec = resolve("sd_chain", {"acceptance": "lantern", "lantern_delta": 0.2})
    assert (spec["lantern_k"], spec["lantern_delta"], spec["proximity"]) == (1000, 0.2, "l2")
    with pytest.raises(ValueError, match="lantern_k is read only by acceptance 'lantern'"):
        resolve("sd_chain", {"lantern_k": 3})
    # a LANTERN method made exact keeps no delta (its cell would read as a relaxed one)
    exact = resolve("lantern_eagle", {"acceptance": "sampling", "temperature": 1.0})
    assert not {"lantern_k", "lantern_delta", "proximity", "divergence"} & set(exact)
    with pytest.raises(ValueError, match=r"lantern_delta is read only by .* acceptance 'sampling'"):
        resolve("lantern_eagle", {"acceptance": "sampling", "lantern_delta": 0.2})
    with pytest.raises(ValueError, match=r"lantern_delta .* must be in \[0, 1\]"):
        resolve("sd_chain", {"acceptance": "lantern", "lantern_delta": 1.5})
    with pytest.raises(ValueError, match="divergence='kl' is not one of"):
        resolve("sd_chain", {"acceptance": "lantern", "divergence": "kl"})
    with pytest.raises(ValueError, match="this target has none"):
        make_rule(spec)  # no codebook: a text-only target


def _expected(run) -> tuple[float, float]:
    """(E[accepted length], E[relaxed nodes]) of `run(sampler) -> (path, token, relaxed)` over
    every outcome of its coins and draws."""
    length = relaxed = 0.0
    for prob, (path, _, count) in outcomes(run):
        length += prob * len(path)
        relaxed += prob * count
    return length, relaxed


@pytest.mark.parametrize("delta", [0.0, 0.1, 0.4])
def test_relaxed_nodes_are_those_the_same_draw_would_have_rejected_exactly(delta):
    """A chain drawn from q: position i is reached with probability prod_{j<i} b_j and accepted
    by relaxing with b_i - a_i (b: LANTERN's min(1, p(A)/q), a: the lossless min(1, p/q)).
    A one-level tree of point masses: sibling s is reached after the earlier ones were rejected
    and accepted by relaxing with p(A_s) - p_s(x_s) under the residual p_s."""
    rule = _rule(6, delta)
    relax = lantern._Relax(rule.params["neighbours"], delta, "tvd")
    logits, q, tokens = _case(5)
    logits, q = logits.double(), q.double()
    p_rows = torch.softmax(logits, -1)
    chain = Proposal.chain(tokens, q)
    reach, want_length, want_relaxed = 1.0, 0.0, 0.0
    for i, x in enumerate(tokens):
        a = min(1.0, float(p_rows[i, x] / q[i, x]))
        b = min(1.0, float(relax(p_rows[i], x)[1] / q[i, x]))
        want_relaxed += reach * (b - a)
        reach *= b
        want_length += reach
    length, relaxed = _expected(lambda s: rule.verdict(chain, logits, 1.0, s))
    assert math.isclose(length, want_length, rel_tol=1e-9)
    assert math.isclose(relaxed, want_relaxed, rel_tol=1e-9, abs_tol=1e-12)
    assert (relaxed > 0.01) == (delta > 0)

    tree = Proposal()
    siblings = p_rows[0].topk(3).indices.tolist()
    for t in siblings:
        tree.add(t, ROOT)
    p, reach, want_relaxed = p_rows[0], 1.0, 0.0
    for x in siblings:
        chance, rest = relax.point_mass(p, x)
        want_relaxed += reach * (chance - float(p[x]))
        reach *= 1 - chance
        p = rest
    _, relaxed = _expected(lambda s: rule.verdict(tree, logits[:4], 1.0, s))
    assert math.isclose(relaxed, want_relaxed, rel_tol=1e-9, abs_tol=1e-12)


def test_greedy_counts_an_accepted_neighbour_of_the_argmax_as_relaxed():
    table = _neighbours(3)
    x = OFFSET + 2
    near = table.of(x).tolist()
    logits = torch.full((2, OFFSET + 24), -9.0)
    logits[0, near[0]], logits[0, x] = 2.0, 1.9  # the argmax is x's nearest neighbour
    chain = Proposal.chain([x])
    assert _rule(3, 0.0).verdict(chain, logits, 0.0, None)[::2] == ([], 0)
    assert _rule(3, 0.6).verdict(chain, logits, 0.0, None)[::2] == ([0], 1)
    exact = Proposal.chain([near[0]])
    assert _rule(3, 0.6).verdict(exact, logits, 0.0, None)[::2] == ([0], 0)
