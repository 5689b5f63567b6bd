"""Token trees: one-forward verification with a tree mask and tree position ids, KV compaction
to the accepted path, greedy longest-path acceptance and recursive rejection sampling."""

from __future__ import annotations

import pytest
import torch
from component_parts import part
from test_engine import prompts

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import Drafter
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.trees import (
    EAGLE_TREE,
    ChainPolicy,
    DynamicTree,
    SageTree,
    StaticTree,
    drafting_temperature,
    full_tree,
)

PROMPT_LEN = 12


def _prompt(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, model.get_output_embeddings().out_features, (PROMPT_LEN,), generator=g)
    with torch.no_grad():
        return model.get_input_embeddings()(ids)


# root -> a, b; a -> c, d; c -> e; b -> f   (node indices 0..5 in topological order)
PARENTS = [ROOT, ROOT, 0, 0, 2, 1]
TOKENS = [11, 12, 13, 14, 15, 16]


def _path_to(node: int) -> list[int]:
    path = []
    while node != ROOT:
        path.append(node)
        node = PARENTS[node]
    return path[::-1]


def test_one_tree_forward_equals_each_path_run_alone(target_model):
    prompt, root_token = _prompt(target_model), 7
    tree = Proposal(TOKENS, PARENTS)
    dec = Decoder(target_model)
    dec.prefill(prompt)
    logits = dec.extend([root_token] + TOKENS, tree.attention()).logits[0]
    for node in range(len(TOKENS)):
        alone = Decoder(target_model)
        alone.prefill(prompt)
        seq = [root_token] + [TOKENS[i] for i in _path_to(node)]
        expected = alone.extend(seq).logits[0, -1]
        torch.testing.assert_close(logits[node + 1], expected, atol=1e-4, rtol=1e-4)


def test_compacted_cache_continues_like_the_accepted_path(target_model):
    prompt, root_token = _prompt(target_model, 1), 7
    tree = Proposal(TOKENS, PARENTS)
    dec = Decoder(target_model)
    dec.prefill(prompt)
    base = dec.length
    dec.extend([root_token] + TOKENS, tree.attention())
    path = _path_to(4)  # a, c, e
    dec.keep(base, [0] + [i + 1 for i in path])
    assert dec.length == base + 1 + len(path)
    got = dec.extend([9, 10]).logits[0]
    alone = Decoder(target_model)
    alone.prefill(prompt)
    expected = alone.extend([root_token] + [TOKENS[i] for i in path] + [9, 10]).logits[0, -2:]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_greedy_follows_the_matching_child():
    v = 20
    logits = torch.full((len(TOKENS) + 1, v), -5.0)
    for row, token in [(0, 12), (2, 16), (6, 3)]:  # root wants b (12); b wants f (16); f wants 3
        logits[row, token] = 5.0
    path, nxt = accept_greedy(Proposal(TOKENS, PARENTS), logits, 0.0, None)
    assert path == [1, 5] and nxt == 3


class OracleTreeDrafter(Drafter):
    """A test drafter that knows the AR output: each tree level holds a wrong sibling first and
    the right token second, and one branch continues three levels deep."""

    def __init__(self, ar_tokens: list[int], vocab: int):
        super().__init__(0.0)
        self.ar, self.vocab, self.emitted = ar_tokens, vocab, 1

    def start(self, prompts, first_token, target):
        self.emitted = 1

    def oracle(self, depth) -> Proposal:
        tokens, parents, parent = [], [], ROOT
        for d in range(depth):
            right = self.ar[min(self.emitted + d, len(self.ar) - 1)]
            tokens += [(right + 1) % self.vocab, right]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return Proposal(tokens, parents)

    def commit(self, proposal, path, next_token, target):
        self.emitted += len(path) + 1


class OraclePolicy:
    def start(self):
        pass

    def observe(self, accepted):
        pass

    def propose(self, drafter, sampler, room):
        return drafter.oracle(min(3, room))


def test_greedy_tree_decoding_equals_ar(target_model):
    prompt = _prompt(target_model, 2)
    vocab = target_model.get_output_embeddings().out_features
    ar = decode_ar(Decoder(target_model), prompt, 30, set(), 0.0, None)
    drafter = OracleTreeDrafter(ar.tokens, vocab)
    sd = decode_speculative(
        Decoder(target_model),
        prompt,
        drafter,
        [],
        OraclePolicy(),
        accept_greedy,
        30,
        set(),
        0.0,
        None,
    )
    assert sd.tokens == ar.tokens
    # the right token is always in the tree, so all 3 levels are accepted (the last step may be
    # cut at max_new)
    assert all(s.accepted == 3 for s in sd.steps[:-1])
    assert all(s.drafted == 6 for s in sd.steps[:-1])  # the last may be cut by max_new


# --- a draft model proposing static trees, alone and as a batched ensemble -----------------------

TREES = {
    "binary3": full_tree(2, 3),
    "mixed": [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)],
}


@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("views", ["M", "MT"])
def test_static_tree_drafting_is_lossless(processor, target_model, draft_model, tree, views):
    policy = StaticTree(TREES[tree])
    for seed in range(2):
        sd, _ = _greedy_tree_run(processor, target_model, draft_model, policy, views, seed)
        assert all(s.drafted == len(policy) for s in sd.steps[:-3])  # the last: room for less
        assert all(s.accepted <= max(policy.depths) for s in sd.steps)


def _greedy_tree_run(processor, target_model, draft_model, policy, views, seed):
    """Greedy speculative decoding with a tree policy; asserts it equals AR token for token."""
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, drafts = prompts(processor, target_model, draft_model, seed)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    drafter = ModelDrafter(Decoder(draft_model), 0.0)
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        drafter,
        [drafts[v] for v in views],
        policy,
        accept_greedy,
        40,
        stop,
        0.0,
        None,
    )
    assert sd.tokens == ar.tokens
    return sd, drafter


def test_self_drafted_tree_accepts_its_deepest_path(processor, target_model):
    """With the target as its own draft, the rank-0 path is always accepted in full."""
    target_prompt, _ = prompts(processor, target_model, target_model)
    policy = StaticTree(TREES["mixed"])
    drafter = ModelDrafter(Decoder(target_model), 0.0)
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        drafter,
        [target_prompt],
        policy,
        accept_greedy,
        26,
        set(),
        0.0,
        None,
    )
    assert [s.accepted for s in sd.steps[:-1]] == [4] * (len(sd.steps) - 1)


def test_static_tree_rejects_bad_paths():
    with pytest.raises(ValueError, match="prefix"):
        StaticTree([(0,), (0, 0, 0)])
    with pytest.raises(ValueError, match="distinct"):
        StaticTree([(0,), (0,)])
    assert len(StaticTree(full_tree(3, 2))) == 12
    assert StaticTree([(0,), (2,)]).ranks == [0, 2]  # point-mass verification needs no 0..k-1


@pytest.mark.parametrize("views", ["M", "MT"])
def test_dynamic_tree_drafting_is_lossless(processor, target_model, draft_model, views):
    policy = DynamicTree(depth=4, top_k=3, total_tokens=10)
    for seed in range(2):
        sd, drafter = _greedy_tree_run(processor, target_model, draft_model, policy, views, seed)
        # total_tokens counts the root (EAGLE-2's release); depth + 1 levels
        assert all(s.drafted <= 9 and s.accepted <= 5 for s in sd.steps)
        assert all(s.drafted == 9 for s in sd.steps[:-2])


def _started_drafter(processor, target_model, draft_model):
    _, drafts = prompts(processor, target_model, draft_model)
    drafter = ModelDrafter(Decoder(draft_model), 0.0)
    drafter.start([drafts["M"]], first_token=5, target=None)
    return drafter


def test_dynamic_tree_keeps_the_best_cumulative_nodes(processor, target_model, draft_model):
    """depth + 1 levels (the root's top_k, then `depth` rounds), one draft forward each; the kept
    tree is prefix-closed and holds the total_tokens - 1 best candidates."""
    drafter = _started_drafter(processor, target_model, draft_model)
    tree = DynamicTree(depth=3, top_k=4, total_tokens=10).propose(drafter, None, room=100)
    assert drafter.forwards == 4  # the root, then 3 expansion rounds
    assert len(tree.tokens) == 9
    assert all(p < i for i, p in enumerate(tree.parents))  # topological, prefix-closed
    assert 1 <= tree.depths().count(1) <= 4 and max(tree.depths()) <= 4
    # never deeper than the generation may still emit
    shallow = DynamicTree(depth=3, top_k=4, total_tokens=10).propose(drafter, None, room=2)
    assert max(shallow.depths()) <= 2


@pytest.mark.parametrize("views", ["M", "MT"])
def test_sage_tree_drafting_is_lossless(processor, target_model, draft_model, views):
    policy = SageTree(window=3)  # short history window, so it acts within 40 tokens
    for seed in range(2):
        sd, drafter = _greedy_tree_run(processor, target_model, draft_model, policy, views, seed)
        assert all(1 <= s.drafted <= policy.n_max for s in sd.steps)
        assert all(s.depth <= policy.d_max for s in sd.steps)
        assert sd.steps[0].drafted == len(EAGLE_TREE)  # SAGE's first step: EAGLE's tree
        assert 0 <= policy.alpha <= 1


def test_sage_shape_and_confidence():
    sage = SageTree()
    assert sage.shape(0.0, 8) == (3, 10.0) and sage.shape(1.0, 8) == (8, 2.0)
    assert sage.confidence(torch.full((50,), 1 / 50)) == pytest.approx(0.0, abs=1e-6)
    one_hot = torch.zeros(50)
    one_hot[3] = 1.0
    assert sage.confidence(one_hot) == pytest.approx(1.0)


class _PeakedDrafter:
    """A stand-in drafter: every position's distribution puts 0.15 on each of six tokens."""

    def __init__(self):
        self.q = torch.full((50,), 0.1 / 44)
        self.q[:6] = 0.15

    def root(self, sampler):
        return self.q

    def expand(self, tree, nodes):
        return self.q.expand(len(nodes), -1)


def test_sage_history_lowers_and_raises_the_max_depth():
    sage = SageTree(window=3)
    sage.alpha, sage.accepted = 0.5, [0, 1, 0]
    tree = sage.propose(_PeakedDrafter(), None, room=100)
    assert sage.working_d_max == 7  # mean 0.33 < 2: Dmax 8 -> 7
    # alpha 0.5: D = round(3 + 0.5 * (7 - 3)) = 5, W = 6; level 1 keeps all six (0.15 > 0.1 / 5);
    # level 2 would take 2 children of each, at path probability 0.0225 <= 0.1 * 2 / 5: pruned
    assert tree.depths().count(1) == 6 and max(tree.depths()) == 1
    assert sage.alpha == pytest.approx(sage.confidence(_PeakedDrafter().q))
    sage.accepted, sage.working_d_max = [4, 5, 4], 5
    sage.propose(_PeakedDrafter(), None, room=100)
    assert sage.working_d_max == 6  # mean 4.33 > 3: raised by one, at most 8


@pytest.mark.parametrize("policy", ["grid", "kld"])
@pytest.mark.parametrize("tree", ["spine", "dynamic", "sage"])
def test_history_weights_over_trees_are_lossless(
    processor, target_model, draft_model, policy, tree
):
    """TABED's adaptive weights with token trees (its Table 2): the history gains the positions
    after the root and after each accepted drafted node, and stays lossless."""
    from mmspec.methods.registry import spine_tree

    shapes = {
        "spine": StaticTree([tuple(p) for p in spine_tree(2, 4)]),
        "dynamic": DynamicTree(depth=3, top_k=3, total_tokens=8),
        "sage": SageTree(window=3),
    }
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, drafts = prompts(processor, target_model, draft_model, 1)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    vocab = draft_model.get_output_embeddings().out_features
    weights = part("weights", policy).build(vocab_size=vocab)
    drafter = ModelDrafter(Decoder(draft_model), 0.0, weights)
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        drafter,
        [drafts["M"], drafts["T"]],
        shapes[tree],
        accept_greedy,
        40,
        stop,
        0.0,
        None,
    )
    assert sd.tokens == ar.tokens
    # one history position per step at least (after the root), more when nodes were accepted
    assert len(drafter.history) >= len(sd.steps)
    assert len(drafter.history) <= sum(s.accepted + 1 for s in sd.steps)
    assert len({s.weights for s in sd.steps}) > 1  # the weights adapted


class FeatureHead(Drafter):
    """A trained-head drafter in a few lines: its distribution after a node is the target's
    lm_head applied to the target's last accepted hidden state plus the node's token embedding
    (nothing trained; what matters is that it reads only the target's features)."""

    def __init__(self, target_model):
        super().__init__(0.0)
        self.lm_head, self.embed = target_model.lm_head, target_model.get_input_embeddings()

    def start(self, prompts, first_token, target):
        self.feature, self.root_token = target.hidden[-1], first_token

    def _after(self, feature, token):
        with torch.no_grad():
            return torch.softmax(self.lm_head(feature + self.embed.weight[token]), -1)

    def root(self, sampler):
        return self._after(self.feature, self.root_token)

    def expand(self, tree, nodes):
        return torch.stack([self._after(self.feature, tree.tokens[n]) for n in nodes])

    def commit(self, tree, path, next_token, target):
        assert target.hidden.shape[0] == len(path) + 1  # the root and each accepted node
        self.feature, self.root_token = target.hidden[-1], next_token


@pytest.mark.parametrize(
    "policy",
    [ChainPolicy(3), StaticTree(EAGLE_TREE), DynamicTree(3, 3, 8), SageTree(window=3)],
    ids=["chain", "static", "dynamic", "sage"],
)
def test_a_head_on_the_target_features_runs_under_every_tree(processor, target_model, policy):
    """A new drafter plugs in through the protocol alone: the loop is unchanged, greedy == AR."""
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, _ = prompts(processor, target_model, target_model, 2)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    sd = decode_speculative(
        Decoder(target_model),
        target_prompt,
        FeatureHead(target_model),
        [],
        policy,
        accept_greedy,
        40,
        stop,
        0.0,
        None,
    )
    assert sd.tokens == ar.tokens and len(sd.steps) < len(ar.steps) + 1


class _TwoLevels(Drafter):
    """q as a drafter gives it at `temperature` (1 when greedy): the root prefers token 0 over
    token 1 by one logit; token 0's children are near flat over 4 tokens, token 1's peaked."""

    def __init__(self, temperature: float):
        super().__init__(temperature)
        self.at = temperature if temperature > 0 else 1.0

    def _q(self, logits: list[float]) -> torch.Tensor:
        return torch.softmax(torch.tensor(logits, dtype=torch.float64) / self.at, -1)

    def root(self, sampler):
        return self._q([1.0, 0.0, -10.0, -10.0])

    def expand(self, tree, nodes):
        flat, peaked = [0.0, 0.1, 0.2, 0.3], [3.0, -10.0, -10.0, -10.0]
        return torch.stack([self._q(flat if tree.tokens[n] == 0 else peaked) for n in nodes])


def _kept(policy, drafter) -> list[tuple[int, int]]:
    """(token, parent's token; -1 for the root) of each node a proposal keeps."""
    p = policy.propose(drafter, None, 10)
    return sorted(
        (t, -1 if a == ROOT else p.tokens[a]) for t, a in zip(p.tokens, p.parents, strict=True)
    )


def test_a_tree_ranks_its_nodes_by_q_at_temperature_1_whatever_the_sampling_temperature():
    """EAGLE's release scores its dynamic tree with the head's plain log-softmax at any
    temperature. Ranking by q at 1 keeps token 1 and its peaked child; by q at 0.5 the root's gap
    doubles to 2 logits, more than the near-flat level costs, and two children of token 0 win."""
    policy = DynamicTree(depth=1, top_k=2, total_tokens=4)
    at_one = _kept(policy, _TwoLevels(1.0))
    assert at_one == [(0, -1), (0, 1), (1, -1)]  # token 1's child (token 0)
    assert _kept(policy, _TwoLevels(0.5)) == [(0, -1), (2, 0), (3, 0)]
    for temperature in (0.0, 0.5, 0.7, 1.0, 1.5):
        drafting = drafting_temperature(policy, temperature)
        assert _kept(policy, _TwoLevels(drafting)) == at_one
    # a chain draws from q: at the sampling temperature
    assert drafting_temperature(ChainPolicy(3), 0.5) == 0.5
    assert [drafting_temperature(p, 0.5) for p in (StaticTree(EAGLE_TREE), SageTree())] == [1, 1]
