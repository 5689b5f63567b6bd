"""LANTERN's relaxed acceptance: latent neighbour tables, the relaxed set A_{k,delta}, the rules
(greedy, a chain drawn from q, point-mass trees), lossless at delta 0 draw for draw and by exact
enumeration, and its spec keys."""

from __future__ import annotations

import math

import pytest
import torch
from component_parts import part

from mmspec.decoding.acceptance import lantern
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.decoding.component import Values
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
    rule = part(
        "acceptance",
        "lantern",
        lantern_k=k,
        lantern_delta=delta,
        proximity=proximity,
        divergence=divergence,
    )
    return rule.build(codebook=(_codebook(codes), OFFSET))


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
    rule = spec.part("acceptance")
    assert (rule.values["lantern_k"], rule.values["lantern_delta"]) == (1000, 0.2)
    assert rule.values["proximity"] == "l2"
    with pytest.raises(ValueError, match="lantern_k is read only by acceptance 'lantern'"):
        resolve("sd_chain", {"lantern_k": 3})
    # a LANTERN method made exact keeps no delta (its cell would read as a relaxed one)
    exact = resolve("lantern_eagle", {"acceptance": "sampling", "temperature": 1.0})
    assert not {"lantern_k", "lantern_delta", "proximity", "divergence"} & set(exact.params)
    with pytest.raises(ValueError, match=r"lantern_delta is read only by .* acceptance 'sampling'"):
        resolve("lantern_eagle", {"acceptance": "sampling", "lantern_delta": 0.2})
    with pytest.raises(ValueError, match=r"lantern_delta .* must be in \[0, 1\]"):
        resolve("sd_chain", {"acceptance": "lantern", "lantern_delta": 1.5})
    with pytest.raises(ValueError, match="divergence='kl' is not one of"):
        resolve("sd_chain", {"acceptance": "lantern", "divergence": "kl"})
    with pytest.raises(ValueError, match="this target has none"):
        rule.build()  # no codebook: a text-only target


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


def _rule_masking(k: int, delta: float, mask: str):
    rule = part(
        "acceptance",
        "lantern",
        lantern_k=k,
        lantern_delta=delta,
        proximity="l2",
        divergence="tvd",
        lantern_sibling_mask=mask,
    )
    return rule.build(codebook=(_codebook(), OFFSET))


def _peaked(vocab: int, masses: dict[int, float]) -> torch.Tensor:
    """A logits row with (about) these probabilities on these tokens, none elsewhere."""
    row = torch.full((vocab,), -80.0)
    for token, p in masses.items():
        row[token] = math.log(p)
    return row


def test_greedy_takes_the_longest_accepted_path_when_two_children_pass():
    """The release takes the path with the most accepted nodes over every root-to-leaf path
    (models/ea_model_llamagen.py:893-903); following the first child that passes accepts less."""
    table = _neighbours(3)
    x = OFFSET + 2
    near = table.of(x).tolist()
    best = next(t for t in range(OFFSET, OFFSET + 24) if t not in near and t != x)
    vocab = OFFSET + 24
    # root row: best 0.40, x 0.35, x's nearest 0.25: x passes relaxed (0.60), best exactly
    rows = [_peaked(vocab, {best: 0.40, x: 0.35, near[0]: 0.25})]
    tree = Proposal()
    a = tree.add(x, ROOT)  # node 0: passes by relaxing, its child fails
    b = tree.add(best, ROOT)  # node 1: passes exactly, its child passes
    tree.add(OFFSET + 20, a)  # node 2
    tree.add(OFFSET + 21, b)  # node 3
    wanted = {1: OFFSET + 9, 2: OFFSET + 10, 3: OFFSET + 11, 4: OFFSET + 12}  # row -> argmax
    for row in range(1, 5):
        rows.append(_peaked(vocab, {wanted[row]: 0.9, OFFSET + 23: 0.1}))
    rows[2] = _peaked(vocab, {OFFSET + 21: 0.9, OFFSET + 23: 0.1})  # after node 1: node 3's
    logits = torch.stack(rows)
    rule = _rule(3, 0.3)
    assert rule.verdict(tree, logits, 0.0, None) == ([1, 3], wanted[4], 0)
    # ties: the release's first row of retrieve_indices, leaves in node order; node 1 is a
    # leaf before node 2, so [1] wins over [0] though node 0 is the first child to pass
    tie = Proposal([x, best, OFFSET + 20], [ROOT, ROOT, 0])
    assert rule.verdict(tie, logits[:4], 0.0, None) == ([1], OFFSET + 21, 0)
    swapped = Proposal([x, best, OFFSET + 20], [ROOT, ROOT, 1])  # node 0 is now the first leaf
    assert rule.verdict(swapped, logits[:4], 0.0, None) == ([0], wanted[1], 1)


def _accepts_second_sibling(rule, logits, tree) -> float:
    """Exact probability that the second root child is accepted."""
    return sum(
        prob
        for prob, (path, _, _) in outcomes(lambda s: rule.verdict(tree, logits, 1.0, s))
        if path[:1] == [1]
    )


def test_the_release_sibling_mask_zeroes_the_k_plus_one_nearest_codes_of_a_rejected_child():
    """After rejecting x the release zeroes x and its k + 1 nearest codes (merged or not,
    models/ea_model_llamagen.py:769-773) before the next sibling; mmspec's default only A."""
    table = _neighbours(3)
    x = OFFSET + 2
    near = table.of(x).tolist()
    far = next(t for t in range(OFFSET, OFFSET + 24) if t not in near and t != x)
    y = near[1]  # x's second nearest: not merged at k 1, zeroed by the release's k + 1
    vocab = OFFSET + 24
    logits = torch.stack([_peaked(vocab, {x: 0.3, near[0]: 0.1, y: 0.3, far: 0.3})] * 3)
    tree = Proposal([x, y], [ROOT, ROOT])
    merged, release = _rule_masking(1, 0.15, "merged"), _rule_masking(1, 0.15, "release")
    p = torch.softmax(logits[0].double(), -1)
    # merged: x's A = {x, near[0]} is zeroed, y keeps its mass (and its own A's)
    relax = lantern._Relax(merged.params["neighbours"], 0.15, "tvd")
    _, rest = relax.point_mass(p, x)
    want = (1 - float(p[x] + p[near[0]])) * float(relax(rest, y)[1])
    assert float(rest[y]) > 0.4
    assert math.isclose(_accepts_second_sibling(merged, logits.double(), tree), want, rel_tol=1e-9)
    # release: y is gone with x's two nearest; nothing of y's neighbourhood is left but x's
    assert _accepts_second_sibling(release, logits.double(), tree) < 1e-6
    chance, rest = lantern._Relax(release.params["neighbours"], 0.15, "tvd", "release").point_mass(
        p, x
    )
    assert math.isclose(chance, float(p[x] + p[near[0]]), rel_tol=1e-9)
    assert float(rest[[x, near[0], y]].sum()) == 0 and math.isclose(
        float(rest[far]), 1, rel_tol=1e-6
    )
    # and with nothing merged (delta below x's nearest's mass) only x goes, as in the release
    _, rest = lantern._Relax(release.params["neighbours"], 0.05, "tvd", "release").point_mass(p, x)
    assert float(rest[x]) == 0 and float(rest[near[0]]) > 0 and float(rest[y]) > 0


def test_the_release_sibling_mask_is_lossy_at_delta_zero_and_the_default_is_not():
    """At delta 0 the release counts a zero-mass nearest neighbour as merged, so a rejected x
    takes its k + 1 nearest codes' mass with it; the default keeps the target's distribution."""
    table = _neighbours(3)
    x = OFFSET + 2
    near = table.of(x).tolist()
    others = [t for t in range(OFFSET, OFFSET + 24) if t not in near and t != x]
    vocab = OFFSET + 24
    row = _peaked(vocab, {x: 0.3, near[1]: 0.3, others[0]: 0.2, others[1]: 0.2})
    row[near[0]] = -math.inf  # x's nearest has no mass at all
    logits = torch.stack([row] * 3).double()
    target = torch.softmax(logits[0], -1)

    def first_token(rule):
        tree = Proposal([x, others[0]], [ROOT, ROOT])
        dist: dict = {}
        for prob, (path, token, _) in outcomes(lambda s: rule.verdict(tree, logits, 1.0, s)):
            first = tree.tokens[path[0]] if path else token
            dist[(first,)] = dist.get((first,), 0.0) + prob
        return dist

    exact = {(t,): float(target[t]) for t in range(vocab) if target[t] > 0}
    assert total_variation(first_token(_rule_masking(1, 0.0, "merged")), exact) < 1e-9
    assert total_variation(first_token(_rule_masking(1, 0.0, "release")), exact) > 0.05
    assert lantern.Lantern.lossless_with(Values({"lantern_k": 4, "lantern_delta": 0}))
    lossy = {"lantern_k": 4, "lantern_delta": 0, "lantern_sibling_mask": "release"}
    assert not lantern.Lantern.lossless_with(Values(lossy))
    assert lantern.Lantern.lossless_with(Values({**lossy, "lantern_k": 0}))
    spec = resolve("lantern_tree", {"lantern_sibling_mask": "release"})
    assert spec.part("acceptance").values["lantern_sibling_mask"] == "release"
    assert resolve("lantern_tree", {}).params["lantern_sibling_mask"] == "merged"
    with pytest.raises(ValueError, match="lantern_sibling_mask='first' is not one of"):
        resolve("lantern_tree", {"lantern_sibling_mask": "first"})
