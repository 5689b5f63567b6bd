"""Token trees: one-forward verification with a tree mask and tree position ids, KV compaction
to the accepted path, greedy longest-path acceptance and recursive rejection sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from test_engine import prompts

from mmspec.decoding.acceptance import accept_greedy, accept_sampling
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import ModelDrafter
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.trees import DynamicTree, SageTree, StaticTree, full_tree

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


class OracleTreeDrafter:
    """A test drafter that knows the AR output: each tree level holds a wrong sibling first and
    the right token second, and one branch continues three levels deep."""

    def __init__(self, ar_tokens: list[int], vocab: int):
        self.ar, self.vocab, self.emitted = ar_tokens, vocab, 1
        self.weights = torch.ones(1)

    def start(self, prompts, first_token):
        self.emitted = 1

    def propose(self, depth=3) -> Proposal:
        tokens, parents, parent = [], [], ROOT
        for d in range(depth):
            right = self.ar[min(self.emitted + d, len(self.ar) - 1)]
            tokens += [(right + 1) % self.vocab, right]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return Proposal(tokens, parents)

    def commit(self, proposal, path, next_token, target_logits):
        self.emitted += len(path) + 1


class OraclePolicy:
    def propose(self, drafter, generator):
        return drafter.propose()


def test_greedy_tree_decoding_equals_ar(target_model):
    prompt = _prompt(target_model, 2)
    vocab = target_model.get_output_embeddings().out_features
    ar = decode_ar(Decoder(target_model), prompt, 30, set(), 0.0, None)
    drafter = OracleTreeDrafter(ar.tokens, vocab)
    sd = decode_speculative(Decoder(target_model), prompt, drafter, [], OraclePolicy(),
                            accept_greedy, 30, set(), 0.0, None)
    assert sd.tokens == ar.tokens
    # the right token is always in the tree, so all 3 levels are accepted (the last step may be
    # cut at max_new)
    assert all(s.accepted == 3 for s in sd.steps[:-1])
    assert all(s.drafted == 6 for s in sd.steps)


def _without_replacement(q: torch.Tensor, k: int, g: torch.Generator) -> list[int]:
    return [int(t) for t in torch.multinomial(q, k, replacement=False, generator=g)]


def test_recursive_rejection_sampling_matches_the_target():
    """Two levels, two children each drawn without replacement from q: the first emitted token
    follows p_root and, after an accepted child x, the second follows p_x."""
    g = torch.Generator().manual_seed(0)
    v = 6
    p_root = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
    q_root = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25])
    p_next = torch.softmax(torch.randn(v, v, generator=g) * 2, -1)  # the target after token x
    q_next = torch.softmax(torch.randn(v, generator=g), -1)
    n = 20000
    first = np.zeros(v)
    second = np.zeros((v, v))
    for _ in range(n):
        kids = _without_replacement(q_root, 2, g)
        tokens, parents, q_rows = list(kids), [ROOT, ROOT], [q_root, q_root]
        for i in range(len(kids)):
            for y in _without_replacement(q_next, 2, g):
                tokens.append(y)
                parents.append(i)
                q_rows.append(q_next)
        tree = Proposal(tokens, parents, torch.stack(q_rows))
        logits = torch.log(torch.stack([p_root] + [p_next[t] for t in tokens]))
        path, nxt = accept_sampling(tree, logits, 1.0, g)
        emitted = [tokens[i] for i in path] + [nxt]
        first[emitted[0]] += 1
        if path:
            second[emitted[0], emitted[1]] += 1
    assert _chisquare(first, p_root) > 1e-3
    x = int(second.sum(1).argmax())
    assert second[x].sum() > 1000
    assert _chisquare(second[x], p_next[x]) > 1e-3


def _matches_target(counts: np.ndarray, target: torch.Tensor) -> float:
    """Chi-square p-value of token counts against the target's marginal; rare tokens pooled."""
    expected = target.double().numpy() / float(target.sum()) * counts.sum()
    keep = expected >= 5  # pool rare tokens so the chi-square approximation holds
    observed = np.append(counts[keep], counts[~keep].sum())
    expected = np.append(expected[keep], expected[~keep].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0, "a token the target never emits was emitted"
        observed, expected = observed[:-1], expected[:-1]
    return _chisquare(observed, torch.tensor(expected))


def _chisquare(observed: np.ndarray, p: torch.Tensor) -> float:
    expected = p.double().numpy()
    expected = expected / expected.sum() * observed.sum()  # exact totals (scipy checks them)
    return float(stats.chisquare(observed, expected).pvalue)


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
        assert all(s.drafted == len(policy) for s in sd.steps)
        assert all(s.accepted <= max(policy.depths) for s in sd.steps)


def _greedy_tree_run(processor, target_model, draft_model, policy, views, seed):
    """Greedy speculative decoding with a tree policy; asserts it equals AR token for token."""
    stop = {processor.tokenizer.eos_token_id}
    target_prompt, drafts = prompts(processor, target_model, draft_model, seed)
    ar = decode_ar(Decoder(target_model), target_prompt, 40, stop, 0.0, None)
    drafter = ModelDrafter(Decoder(draft_model), 0.0)
    sd = decode_speculative(Decoder(target_model), target_prompt, drafter,
                            [drafts[v] for v in views], policy, accept_greedy, 40, stop, 0.0, None)
    assert sd.tokens == ar.tokens
    return sd, drafter


def test_self_drafted_tree_accepts_its_deepest_path(processor, target_model):
    """With the target as its own draft, the rank-0 path is always accepted in full."""
    target_prompt, _ = prompts(processor, target_model, target_model)
    policy = StaticTree(TREES["mixed"])
    drafter = ModelDrafter(Decoder(target_model), 0.0)
    sd = decode_speculative(Decoder(target_model), target_prompt, drafter, [target_prompt],
                            policy, accept_greedy, 26, set(), 0.0, None)
    assert [s.accepted for s in sd.steps[:-1]] == [4] * (len(sd.steps) - 1)


def test_static_tree_rejects_bad_paths():
    with pytest.raises(ValueError, match="prefix"):
        StaticTree([(0,), (0, 0, 0)])
    with pytest.raises(ValueError, match="0..k-1"):
        StaticTree([(0,), (2,)])
    assert len(StaticTree(full_tree(3, 2))) == 12


@pytest.mark.parametrize("views", ["M", "MT"])
def test_dynamic_tree_drafting_is_lossless(processor, target_model, draft_model, views):
    policy = DynamicTree(depth=4, top_k=3, total_tokens=10)
    for seed in range(2):
        sd, drafter = _greedy_tree_run(processor, target_model, draft_model, policy, views, seed)
        assert all(s.drafted == 10 and s.accepted <= 4 for s in sd.steps)
        assert drafter.forwards == len(sd.steps) * 4  # root + one per deeper level


def test_dynamic_tree_keeps_the_best_cumulative_nodes(processor, target_model, draft_model):
    """The kept tree is prefix-closed and holds the highest-scoring candidates."""
    target_prompt, drafts = prompts(processor, target_model, draft_model)
    drafter = ModelDrafter(Decoder(draft_model), 0.0)
    drafter.start([drafts["M"]], first_token=5)
    tree = drafter.propose_dynamic(DynamicTree(depth=3, top_k=4, total_tokens=9), None)
    assert len(tree.tokens) == 9
    assert all(p < i for i, p in enumerate(tree.parents))  # topological, prefix-closed
    depth1 = [i for i, p in enumerate(tree.parents) if p == ROOT]
    assert 1 <= len(depth1) <= 4


@pytest.mark.parametrize("views", ["M", "MT"])
def test_sage_tree_drafting_is_lossless(processor, target_model, draft_model, views):
    policy = SageTree(window=3)  # short history window, so it acts within 40 tokens
    for seed in range(2):
        sd, drafter = _greedy_tree_run(processor, target_model, draft_model, policy, views, seed)
        assert all(1 <= s.drafted <= policy.n_max for s in sd.steps)
        assert all(s.depth <= policy.d_max for s in sd.steps)
        assert 0 <= drafter.tree_state["alpha"] <= 1


def test_sage_shape_and_confidence():
    sage = SageTree()
    assert sage.shape(0.0, 8) == (3, 10.0) and sage.shape(1.0, 8) == (8, 2.0)
    assert sage.confidence(torch.full((50,), 1 / 50)) == pytest.approx(0.0, abs=1e-6)
    one_hot = torch.zeros(50)
    one_hot[3] = 1.0
    assert sage.confidence(one_hot) == pytest.approx(1.0)


class _Recorder:
    """A stand-in drafter: records the tree shape SAGE asks for."""

    def __init__(self, accepted, q):
        self.tree_state, self.accepted_lengths, self.root_q, self.asked = {}, accepted, q, None

    def propose_grown(self, width, threshold, depth, max_nodes, generator):
        self.asked = (width(1, 1.0), width(2, 0.5), threshold(2), depth, max_nodes)
        return Proposal([1], [ROOT])


def test_sage_history_lowers_and_raises_the_max_depth():
    sage = SageTree(window=3)
    peaked = torch.tensor([0.97] + [0.01] * 3)
    low = _Recorder([0, 1, 0], peaked)
    sage.propose(low, None)
    assert low.tree_state["d_max"] == 7  # mean 0.33 < 2: Dmax 8 -> 7
    # alpha 0.5 at the first step: D = round(3 + 0.5 * (7 - 3)) = 5, W = 6
    assert low.asked == (6, round(6 / 2 * 1.0), pytest.approx(0.1 * 2 / 5), 5, 64)
    assert low.tree_state["alpha"] > 0.5  # the peaked root shapes the next step
    high = _Recorder([4, 5, 4], peaked)
    high.tree_state["d_max"] = 5
    sage.propose(high, None)
    assert high.tree_state["d_max"] == 6  # mean 4.33 > 3: raised by one, at most 8


SAMPLING_POLICIES = {
    "static": StaticTree([(0,), (1,), (2,), (0, 0), (1, 0)]),
    "dynamic": DynamicTree(depth=2, top_k=3, total_tokens=5),
    "sage": SageTree(d_min=1, d_max=3, w_min=2, w_max=4, n_max=12),
}


@pytest.mark.parametrize("name", sorted(SAMPLING_POLICIES))
def test_tree_sampling_draws_from_the_target(processor, target_model, draft_model, name):
    """Chi-square on the first drafted level's emitted token over many seeds (temperature 1)."""
    from test_engine import _exact_marginals

    target_prompt, drafts = prompts(processor, target_model, draft_model)
    _, second = _exact_marginals(target_model, target_prompt)
    target, drafter = Decoder(target_model), ModelDrafter(Decoder(draft_model), 1.0)
    counts = np.zeros(second.shape[0])
    n, accepted = 2000, 0
    for seed in range(n):
        g = torch.Generator().manual_seed(seed)
        out = decode_speculative(target, target_prompt, drafter, [drafts["M"]],
                                 SAMPLING_POLICIES[name], accept_sampling, 2, set(), 1.0, g)
        counts[out.tokens[1]] += 1
        accepted += out.steps[0].accepted > 0
    assert _matches_target(counts, second) > 1e-3
    assert 0 < accepted < n  # both acceptance and rejection paths were exercised


@pytest.mark.parametrize("policy", ["grid", "kld"])
@pytest.mark.parametrize("tree", ["spine", "dynamic", "sage"])
def test_history_weights_over_trees_are_lossless(processor, target_model, draft_model, policy,
                                                 tree):
    """TABED's adaptive weights with token trees (its Table 2): the history gains the positions
    after the root and after each accepted drafted node, and stays lossless."""
    from mmspec.decoding.weights import make_policy
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
    drafter = ModelDrafter(Decoder(draft_model), 0.0, make_policy({"weights": policy}, vocab))
    sd = decode_speculative(Decoder(target_model), target_prompt, drafter,
                            [drafts["M"], drafts["T"]], shapes[tree], accept_greedy, 40, stop,
                            0.0, None)
    assert sd.tokens == ar.tokens
    # one history position per step at least (after the root), more when nodes were accepted
    assert len(drafter.history) >= len(sd.steps)
    assert len(drafter.history) <= sum(s.accepted + 1 for s in sd.steps)
    assert len({s.weights for s in sd.steps}) > 1  # the weights adapted
