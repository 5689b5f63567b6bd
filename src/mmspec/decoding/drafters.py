"""Drafters: propose tokens for the target to verify.

`ModelDrafter` runs a small draft model over m views of the prompt at once: one batched forward
per draft step (parameters shared, one KV-cache row per view, left padding masked). The views'
next-token distributions are mixed with the weights its policy picked for the block; the next
token comes from the mixture and is appended to every view. With one view this is plain
single-view drafting (the mixture is the view's own distribution).

Its cache always holds the committed text except the `pending` tokens, which are fed at the start
of the next proposal (the target's correction/bonus token, plus the last draft token when a whole
chain was accepted).
"""

from __future__ import annotations

import math
import time

import torch

from mmspec.decoding.acceptance import distribution
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.timing import sync
from mmspec.decoding.weights import History, StaticWeights, weight_grid


class ModelDrafter:
    """A draft model drafting from one or more views; counts its forwards and their time (T_q)."""

    def __init__(self, decoder: Decoder, temperature: float, policy=None, window: int = 0):
        self.decoder = decoder
        self.temperature = temperature
        # Views' distributions are mixed as probabilities: at the sampling temperature, or at 1
        # for greedy drafting (argmax of the mixture, as in TABED's released code).
        self.mix_temperature = temperature if temperature > 0 else 1.0
        self.policy = policy or StaticWeights()
        self.window = window
        self.history: History | None = None
        self.weights = torch.ones(1)
        # the views' distributions [m, V] this proposal drafted from, keyed by the node they
        # follow (ROOT: the first position); kept only for history-based weight policies
        self.view_probs: dict[int, torch.Tensor] = {}
        self.pending: list[int] = []
        self.base = 0  # cache length before the current proposal's pending tokens
        self.fed: list[int] = []  # tokens appended to the cache during the current proposal
        self.n_pending = 0  # how many of them were pending tokens
        self.root_q: torch.Tensor | None = None  # the last proposal's first-position mixture
        self.accepted_lengths: list[int] = []  # per step of the current generation
        self.tree_state: dict = {}  # a tree policy's state for the current generation
        self.node_offset: dict[int, int] = {}  # proposal node -> its offset after `base`
        self.forwards = 0
        self.forward_s = 0.0

    @property
    def views(self) -> int:
        return self.decoder.rows

    def start(self, prompts: list[torch.Tensor], first_token: int) -> None:
        """Prefill one cache row per view; the target's first token is fed with the first draft."""
        self.decoder.prefill(prompts)
        self.pending = [first_token]
        self.accepted_lengths, self.tree_state = [], {}
        grid = weight_grid(len(prompts)) if self.policy.uses_grid else None
        self.history = History(self.window, grid)

    def _forward(self, tokens: list[int], **tree) -> torch.Tensor:
        """Feed tokens to every view (timed); the views' logits [m, n, V]."""
        start = time.perf_counter()
        logits = self.decoder.extend(tokens, **tree).logits
        sync(self.decoder.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        self.fed.extend(tokens)
        return logits

    def _extend(self, tokens: list[int]) -> torch.Tensor:
        """Feed tokens to every view; the views' next-token logits [m, V]."""
        return self._forward(tokens)[:, -1]

    def _begin(self, generator) -> torch.Tensor:
        """Start a proposal: pick the block's weights, feed the pending tokens; root logits."""
        self.weights = self.policy.choose(self.history, self.views, generator).float()
        self.view_probs = {}
        self.base, self.fed, self.n_pending = self.decoder.length, [], len(self.pending)
        return self._extend(self.pending)

    def _mixture(self, logits: torch.Tensor, after: int) -> torch.Tensor:
        """The weighted mixture [V] of the views' distributions at the position after node
        `after` (ROOT: the first one)."""
        probs = distribution(logits, self.mix_temperature)
        if self.policy.needs_history:
            self.view_probs[after] = probs
        return self.weights.to(probs.device) @ probs

    def _next(self, logits: torch.Tensor, after: int, generator) -> tuple[int, torch.Tensor | None]:
        """The next draft token from the views' logits, and the mixture q it came from."""
        if self.views == 1 and not self.policy.needs_history:
            if self.temperature == 0:
                return int(logits[0].argmax()), None
            q = distribution(logits[0], self.temperature)
            return int(torch.multinomial(q, 1, generator=generator)), q
        q = self._mixture(logits, after)
        if self.temperature == 0:
            return int(q.argmax()), q
        return int(torch.multinomial(q, 1, generator=generator)), q

    def propose_chain(self, gamma: int, generator: torch.Generator | None) -> Proposal:
        """gamma tokens, each from the weighted mixture of the views (gamma batched forwards)."""
        logits = self._begin(generator)
        self.node_offset = {i: self.n_pending + i for i in range(gamma - 1)}
        tokens, qs = [], []
        for i in range(gamma):
            token, q = self._next(logits, i - 1, generator)  # node i follows node i - 1
            tokens.append(token)
            if self.temperature > 0:
                qs.append(q)
            if i < gamma - 1:
                logits = self._extend([token])
        return Proposal.chain(tokens, torch.stack(qs) if qs else None)

    def propose_tree(self, tree, generator: torch.Generator | None) -> Proposal:
        """A static tree, level by level: one batched forward per level that has children.

        Children of a node are its mixture's top-k (greedy) or k draws without replacement from
        it (sampling); a level's nodes see the committed text and their own ancestors only.
        """
        root = self._begin(generator)
        first = self.decoder.length  # position of depth-1 nodes
        children: dict[int, list[int]] = {}
        for node, parent in enumerate(tree.parents):
            children.setdefault(parent, []).append(node)
        dist = {ROOT: self._mixture(root, ROOT)}
        tokens, qs = [0] * len(tree), [None] * len(tree)
        fed: list[int] = []  # tree nodes in the cache, in feed order
        self.node_offset = {}
        for depth in range(1, max(tree.depths) + 1):
            level = [n for n in range(len(tree)) if tree.depths[n] == depth]
            for parent in dict.fromkeys(tree.parents[n] for n in level):
                kids, q = children[parent], dist[parent]
                if self.temperature == 0:
                    picks = q.topk(len(kids)).indices
                else:
                    picks = torch.multinomial(q, len(kids), replacement=False, generator=generator)
                for kid in kids:
                    tokens[kid], qs[kid] = int(picks[tree.ranks[kid]]), q
            feed = [n for n in level if n in children]
            if not feed:
                break
            past = _past_mask(tree.parents, fed, feed)
            logits = self._forward(
                [tokens[n] for n in feed],
                attention=torch.eye(len(feed), dtype=torch.bool),
                past=past,
                positions=[first + depth - 1] * len(feed),
            )
            for j, node in enumerate(feed):
                dist[node] = self._mixture(logits[:, j], node)
                self.node_offset[node] = self.n_pending + len(fed)
                fed.append(node)
        q = torch.stack(qs) if self.temperature > 0 else None
        return Proposal(tokens, list(tree.parents), q)

    def _children_of(self, q: torch.Tensor, k: int, generator) -> tuple[list[int], list[float]]:
        """k children from q: its top-k (greedy) or k draws without replacement; their log q."""
        if self.temperature == 0:
            picks = q.topk(k).indices
        else:
            picks = torch.multinomial(q, k, replacement=False, generator=generator)
        logq = q[picks].clamp_min(1e-30).log()
        return [int(t) for t in picks], [float(x) for x in logq]

    def _expand(self, cands, frontier, fed, offsets, first: int) -> list[torch.Tensor]:
        """Feed the `frontier` candidates (one level; one batched forward, tree-masked);
        the mixture distribution after each of them."""
        parents = [c[1] for c in cands]
        depth = _depth(parents, frontier[0])
        logits = self._forward(
            [cands[c][0] for c in frontier],
            attention=torch.eye(len(frontier), dtype=torch.bool),
            past=_past_mask(parents, fed, frontier),
            positions=[first + depth - 1] * len(frontier),
        )
        out = []
        for j, c in enumerate(frontier):
            offsets[c] = self.n_pending + len(fed)
            fed.append(c)
            out.append(self._mixture(logits[:, j], c))
        return out

    def _to_proposal(self, cands, keep, offsets) -> Proposal:
        """The kept candidates as a Proposal in topological order (siblings in draw order)."""
        parents = [c[1] for c in cands]
        order = sorted(keep, key=lambda c: (_depth(parents, c), c))
        index = {c: i for i, c in enumerate(order)}
        self.node_offset = {index[c]: offsets[c] for c in order if c in offsets}
        self.view_probs = {
            ROOT if c == ROOT else index[c]: v
            for c, v in self.view_probs.items()
            if c == ROOT or c in index
        }
        q = torch.stack([cands[c][4] for c in order]) if self.temperature > 0 else None
        parents = [index[cands[c][1]] if cands[c][1] != ROOT else ROOT for c in order]
        return Proposal([cands[c][0] for c in order], parents, q)

    def _tree_root(self, generator) -> torch.Tensor:
        self.root_q = self._mixture(self._begin(generator), ROOT)
        return self.root_q

    def propose_dynamic(self, tree, generator: torch.Generator | None) -> Proposal:
        """EAGLE-2: grow by the best cumulative draft log-probabilities, then rerank and prune.

        Candidates are (token, parent, score, rank, q of the parent). At each level the top_k
        candidates of the level are fed (one batched forward) and each gets top_k children.
        The kept nodes are the total_tokens best by score whose parent is kept and, when
        sampling, whose earlier-drawn siblings are kept (recursive rejection sampling verifies
        consecutive draws).
        """
        root_q = self._tree_root(generator)
        first = self.decoder.length
        cands: list[tuple[int, int, float, int, torch.Tensor]] = []
        tokens, logq = self._children_of(root_q, tree.top_k, generator)
        for rank, (t, lq) in enumerate(zip(tokens, logq, strict=True)):
            cands.append((t, ROOT, lq, rank, root_q))
        level, fed, offsets = list(range(len(cands))), [], {}
        for _ in range(2, tree.depth + 1):
            frontier = sorted(level, key=lambda c: -cands[c][2])[: tree.top_k]
            qs = self._expand(cands, frontier, fed, offsets, first)
            level = []
            for c, q in zip(frontier, qs, strict=True):
                tokens, logq = self._children_of(q, tree.top_k, generator)
                for rank, (t, lq) in enumerate(zip(tokens, logq, strict=True)):
                    level.append(len(cands))
                    cands.append((t, c, cands[c][2] + lq, rank, q))
        keep: set[int] = set()
        ranks_kept: dict[tuple[int, int], bool] = {}
        for c in sorted(range(len(cands)), key=lambda c: (-cands[c][2], c)):
            if len(keep) == tree.total_tokens:
                break
            _, parent, _, rank, _ = cands[c]
            if parent != ROOT and parent not in keep:
                continue
            if self.temperature > 0 and rank > 0 and not ranks_kept.get((parent, rank - 1)):
                continue
            keep.add(c)
            ranks_kept[(parent, rank)] = True
        return self._to_proposal(cands, keep, offsets)

    def propose_grown(self, width, threshold, depth: int, max_nodes: int, generator) -> Proposal:
        """A tree grown level by level under caller rules (SAGE): a node at level l with path
        probability P gets `width(l, P_parent)` children, taken from its mixture's top (greedy)
        or drawn without replacement (sampling) and kept while their path probability exceeds
        `threshold(l)` (the best first-level child is always kept); kept nodes are expanded
        until level `depth` or `max_nodes` nodes."""
        root_q = self._tree_root(generator)
        first = self.decoder.length
        cands: list[tuple[int, int, float, int, torch.Tensor]] = []

        def add_children(parent: int, q: torch.Tensor, level: int, prob: float) -> list[int]:
            k = min(width(level, prob), max_nodes - len(cands), q.shape[-1])
            if k < 1:
                return []
            added = []
            tokens, logq = self._children_of(q, k, generator)
            for rank, (t, lq) in enumerate(zip(tokens, logq, strict=True)):
                path_prob = prob * math.exp(lq)
                if path_prob <= threshold(level) and not (level == 1 and rank == 0):
                    break  # later draws are not verified either (a prefix of draws)
                score = math.log(max(path_prob, 1e-30))
                added.append(len(cands))
                cands.append((t, parent, score, rank, q))
            return added

        level, fed, offsets = add_children(ROOT, root_q, 1, 1.0), [], {}
        for lvl in range(2, depth + 1):
            if not level or len(cands) >= max_nodes:
                break
            qs = self._expand(cands, level, fed, offsets, first)
            nxt = []
            for c, q in zip(level, qs, strict=True):
                nxt += add_children(c, q, lvl, math.exp(cands[c][2]))
            level = nxt
        return self._to_proposal(cands, set(range(len(cands))), offsets)

    def commit(
        self, proposal: Proposal, path: list[int], next_token: int, target_logits: torch.Tensor
    ) -> None:
        """Keep the accepted path in the cache, queue what it lacks, and update the history.

        `target_logits` are the verification logits (row 0 after the root, row i + 1 after
        node i); the history gains the accepted positions and the first rejected one (for a
        tree: the positions after the root and after each accepted node that was drafted from).
        """
        cached = [self.node_offset[i] for i in path if i in self.node_offset]
        self.decoder.keep(self.base, list(range(self.n_pending)) + cached)
        missing = [proposal.tokens[i] for i in path if i not in self.node_offset]
        self.pending = missing + [next_token]
        self.accepted_lengths.append(len(path))
        if self.view_probs:
            seen = []
            for node in [ROOT, *path]:
                if node not in self.view_probs:
                    break  # the last accepted node of a fully accepted proposal: never fed
                seen.append(node)
            p = distribution(target_logits[[n + 1 for n in seen]], self.mix_temperature)
            self.history.observe(p, torch.stack([self.view_probs[n] for n in seen]))


def _ancestors(parents: list[int], node: int) -> set[int]:
    """The proper ancestors of `node` in a tree given by parent indices (ROOT at the top)."""
    out, parent = set(), parents[node]
    while parent != ROOT:
        out.add(parent)
        parent = parents[parent]
    return out


def _depth(parents: list[int], node: int) -> int:
    """1 for the root's children, 2 below them, ..."""
    return len(_ancestors(parents, node)) + 1


def _past_mask(parents: list[int], fed: list[int], nodes: list[int]) -> torch.Tensor:
    """[len(nodes), len(fed)]: which tree nodes already in the draft cache each new node sees
    (its ancestors)."""
    ancestors = [_ancestors(parents, n) for n in nodes]
    rows = [[a in above for a in fed] for above in ancestors]
    return torch.tensor(rows, dtype=torch.bool).view(len(nodes), len(fed))
