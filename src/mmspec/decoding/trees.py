"""Tree policies: the shape of what a drafter proposes at each step, grown through the drafter
protocol (decoding.drafters): `root` for the first position, `expand` for the nodes to grow.

A chain samples its tokens from the draft at temperature > 0 (verified by rejection sampling
against q). Trees take each node's children deterministically (its top-k), at any temperature,
rank them by q at temperature 1 (`drafting_temperature`), and are verified as point-mass
proposals (decoding.acceptance.sampling): the pruning and reranking
of EAGLE-2 and SAGE then cannot bias the output, as EAGLE's release does. Policies with state
across steps (SAGE) reset it in `start` and learn from `observe(accepted)` after each step.

`room` is how many more tokens the generation may emit: no policy drafts deeper than that, since a
node at depth d is emitted only as the d-th token of the step (exact: each level is accepted in
order, so what lies deeper cannot change what is emitted).

Every policy honours the drafter's two ways of drafting less (decoding.drafters): a `root` of
None gives an empty proposal (the step is one autoregressive step), an `expand` of None ends the
proposal with the nodes grown so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mmspec.decoding import catalog, component
from mmspec.decoding.component import NUMBER, Param, Values
from mmspec.decoding.lazy import torch
from mmspec.decoding.proposal import ROOT, Proposal

# EAGLE's 25-node tree (`mc_sim_7b_63` in its choices.py), which SpecVLM's release uses for its
# static trees and SAGE for SD-Tree, SpecVLM and its own first step (SAGE appendix A.1).
EAGLE_TREE = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip


class TreePolicy(component.TreePolicy):
    """The protocol every tree policy follows (and declares itself: `decoding.component`)."""

    @classmethod
    def max_depth(cls, spec: Values) -> int | None:
        """How deep its proposals can be (None: it decides as it drafts)."""
        return None

    def start(self) -> None:
        """A new generation."""

    def observe(self, accepted: int) -> None:
        """The last proposal's accepted path length."""

    def propose(self, drafter, sampler, room: int) -> Proposal:
        """The step's `Proposal`, grown by calling the drafter's `root` and `expand`, no deeper
        than `room` (the tokens the generation may still emit): an empty one where `root`
        returns None, what it grew so far where `expand` does. A policy that draws its nodes
        from q (`draws`) sets the proposal's `q`, one row per node; one that picks them
        leaves it None (point masses)."""
        raise NotImplementedError(f"tree policy {self.name!r} defines no propose")


def drafting_temperature(policy, temperature: float) -> float:
    """The temperature of the distributions a drafter gives `policy` (a policy or its class;
    `draws` declared in decoding.component): a chain drawn from q at the sampling temperature
    (its rejection sampling needs the q it drew from); a tree, whose nodes are picked, ranks
    them by q at temperature 1 whatever the sampling temperature, as EAGLE's release does
    (eagle/model/cnets.py `topK_genrate` scores with the head's plain log-softmax; its logits
    processor is not used there). Greedy stays 0 (q at 1 then)."""
    return temperature if temperature == 0 or policy.draws else 1.0


def _top(q: torch.Tensor, k: int) -> tuple[list, list]:
    """The k most likely tokens of q [V] (or of each row of q [n, V]; fewer if V < k) and their
    log-probabilities, as lists (one batched top-k and one copy per level, not per node)."""
    top = q.topk(min(k, q.shape[-1]))
    return top.indices.tolist(), top.values.clamp_min(1e-30).log().tolist()


# The chain's length: a component checking chains reads it as `spec.of(GAMMA)` (mmspec.api)
GAMMA = Param("gamma", int, 5, "draft tokens per step", low=1)
PATHS = Param(
    "paths", list, None, "the tree as paths of child ranks, e.g. [[0], [1], [0, 0]]", optional=True
)


@catalog.register
@dataclass
class ChainPolicy(TreePolicy):
    """chain(gamma): gamma tokens in a line (standard speculative decoding), fewer where the
    drafter's `root` or `expand` returns None (nothing more to propose: Kangaroo's early exit,
    prompt lookup's end of a match)."""

    name = "chain"
    params = (GAMMA,)
    description = "a chain of gamma draft tokens"
    draws = True  # at temperature > 0

    gamma: int

    @classmethod
    def max_depth(cls, spec: Values) -> int | None:
        return spec.of(GAMMA)

    def propose(self, drafter, sampler, room: int) -> Proposal:
        q, chain, qs = drafter.root(sampler), Proposal(), []
        gamma = min(self.gamma, room)
        for i in range(gamma):
            if q is None:
                break
            if drafter.temperature > 0:
                chain.add(sampler.categorical(q), i - 1)
                qs.append(q)
            else:
                chain.add(int(q.argmax()), i - 1)
            if i < gamma - 1:
                q = drafter.expand(chain, [i])
                q = None if q is None else q[0]
        chain.q = torch.stack(qs) if qs else None
        return chain


@catalog.register
@dataclass
class StaticTree(TreePolicy):
    """A fixed tree given as paths of child ranks (the Medusa/EAGLE "choices" format).

    (0,) is the draft's best first token, (1,) its second best, (0, 1) the second-best
    continuation of (0,), and so on. Every prefix of a path must be a path; sibling ranks need
    not be consecutive. Grown level by level: one batched draft forward per level with children.
    """

    name = "static"
    params = (PATHS,)
    description = "a static tree of paths of child ranks"

    paths: list[tuple[int, ...]]
    parents: list[int] = field(init=False)
    depths: list[int] = field(init=False)
    ranks: list[int] = field(init=False)

    @classmethod
    def from_spec(cls, spec: Values) -> TreePolicy:
        return cls([tuple(p) for p in spec.of(PATHS)])

    @classmethod
    def max_depth(cls, spec: Values) -> int | None:
        return max(len(p) for p in spec.of(PATHS))

    @classmethod
    def check(cls, spec: Values) -> None:
        paths = spec.of(PATHS)
        if not (
            isinstance(paths, list)
            and paths
            and all(
                isinstance(p, list)
                and p
                and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p)
                for p in paths
            )
        ):
            raise ValueError(
                "tree 'static' needs `paths`: a list of paths of child ranks, "
                "e.g. [[0], [1], [0, 0]]"
            )
        known = {tuple(p) for p in paths}
        for p in paths:
            if len(p) > 1 and tuple(p[:-1]) not in known:
                raise ValueError(f"paths: {p} lacks its prefix {p[:-1]}")
        if len(known) != len(paths):
            raise ValueError("paths: a path is listed twice")

    def __post_init__(self):
        paths = sorted({tuple(int(r) for r in p) for p in self.paths}, key=lambda p: (len(p), p))
        if not paths or len(paths) != len(self.paths):
            raise ValueError("a static tree needs distinct, non-empty paths of child ranks")
        index = {p: i for i, p in enumerate(paths)}
        for p in paths:
            if not p or min(p) < 0:
                raise ValueError(f"tree path {list(p)}: ranks are non-negative integers")
            if len(p) > 1 and p[:-1] not in index:
                raise ValueError(f"tree path {list(p)} lacks its prefix {list(p[:-1])}")
        self.paths = paths
        self.parents = [index[p[:-1]] if len(p) > 1 else ROOT for p in paths]
        self.depths = [len(p) for p in paths]
        self.ranks = [p[-1] for p in paths]
        self.max_rank: dict[int, int] = {}
        for parent, rank in zip(self.parents, self.ranks, strict=True):
            self.max_rank[parent] = max(rank, self.max_rank.get(parent, 0))

    def __len__(self) -> int:
        return len(self.paths)

    def propose(self, drafter, sampler, room: int) -> Proposal:
        tree, dist = Proposal(), {ROOT: drafter.root(sampler)}
        if dist[ROOT] is None:
            return tree
        has_children = {p for p, d in zip(self.parents, self.depths, strict=True) if d <= room}
        for depth in range(1, min(max(self.depths), room) + 1):
            level = [n for n in range(len(self)) if self.depths[n] == depth]
            ranked: dict[int, list[int]] = {}
            for n in level:  # nodes are sorted by depth, so index n == tree.add(...)
                parent = self.parents[n]
                if parent not in ranked:
                    q, most = dist[parent], self.max_rank[parent] + 1
                    ranked[parent] = q.topk(min(most, q.shape[-1])).indices.tolist()
                # a rank beyond the vocabulary repeats the last token (never accepted twice)
                tree.add(ranked[parent][min(self.ranks[n], len(ranked[parent]) - 1)], parent)
            feed = [n for n in level if n in has_children]
            if feed:
                q = drafter.expand(tree, feed)
                if q is None:
                    break  # the drafter stops: this level is the last
                dist.update(zip(feed, q, strict=True))
        return tree


DEPTH = Param("depth", int, 5, "expansion rounds after the root's top_k", low=1)


@catalog.register
@dataclass
class DynamicTree(TreePolicy):
    """EAGLE-2's dynamic tree (its release, eagle/model/cnets1.py `topK_genrate`): the root's
    top_k children, then `depth` rounds, each expanding the top_k nodes of the newest level by
    cumulative draft log-probability (each with its top_k children; depth + 1 levels in all);
    then keep the total_tokens - 1 candidates of highest cumulative log-probability (the release
    counts the root among its total_tokens), each with its ancestors."""

    name = "dynamic"
    params = (
        DEPTH,
        Param("top_k", int, 10, "children per expanded node", low=1),
        Param(
            "total_tokens",
            int,
            60,
            "nodes kept after reranking, the root included",
            low=2,
            meaning="counts the root too (EAGLE-2's release)",
        ),
    )
    description = "EAGLE-2's dynamic tree"
    # The release's own defaults differ by version: its evaluation scripts
    # (eagle/evaluation/gen_ea_answer_*.py, EAGLE-2 commit bfeb532) run 5 / 10 / 60, while
    # ea_model.py's from_pretrained defaults are 5 / 10 / 59 there and 7 / 10 / 60 from EAGLE-3
    # (f2f2366) on. These are the evaluation's, which the paper's numbers come from.
    source = (
        "EAGLE-2's release (SafeAILab/EAGLE bfeb532), eagle/evaluation/gen_ea_answer_*.py: "
        "--depth 5, --top-k 10, --total-token 60 (ea_model.py defaults: total_token 59 there, "
        "depth 7 / total_token 60 from EAGLE-3 on); trees ranked by q at temperature 1 "
        "(eagle/model/cnets.py topK_genrate)"
    )

    depth: int
    top_k: int
    total_tokens: int

    @classmethod
    def max_depth(cls, spec: Values) -> int | None:
        return spec.of(DEPTH) + 1

    def propose(self, drafter, sampler, room: int) -> Proposal:
        grown, score = Proposal(), []
        root = drafter.root(sampler)
        if root is None:
            return grown
        tokens, logq = _top(root, self.top_k)
        level = [grown.add(t, ROOT) for t in tokens]
        score += logq
        for _ in range(min(self.depth, room - 1)):
            frontier = sorted(level, key=lambda c: (-score[c], c))[: self.top_k]
            level = []
            q = drafter.expand(grown, frontier)
            if q is None:
                break  # the drafter stops: rerank what was grown
            tokens, logq = _top(q, self.top_k)
            for c, children, child_logq in zip(frontier, tokens, logq, strict=True):
                level += [grown.add(t, c) for t in children]
                score += [score[c] + lq for lq in child_logq]
        keep: set[int] = set()
        for c in sorted(range(len(grown.tokens)), key=lambda c: (-score[c], c)):
            if len(keep) == self.total_tokens - 1:
                break
            if grown.parents[c] == ROOT or grown.parents[c] in keep:
                keep.add(c)
        return grown.subset(keep)


SAGE_D_MAX = Param("sage_d_max", int, 8, "Dmax, the greatest depth", low=1, arg="d_max")


@catalog.register
@dataclass
class SageTree(TreePolicy):
    """SAGE's entropy-adaptive tree (arXiv 2025, section 3; defaults from its section 5.1).

    The first step drafts EAGLE's 25-node static tree (SAGE appendix A.1: "SAGE uses it only as
    initialization"). Confidence alpha = 1 - H / log k of the draft's renormalised top-k at the
    first draft position; the alpha of step t shapes step t+1. Depth D = Dmin + alpha (Dmax -
    Dmin), width W = Wmin + (1 - alpha)(Wmax - Wmin); level 1 takes W children, a node at level
    l >= 2 W (1/l)(0.5 + P_parent) (P_parent: the parent's path probability); a node is kept while
    its path probability exceeds 0.1 l / D (the best first-level child always); growth stops at
    level D or n_max nodes. History: once `window` steps are in, a mean accepted length below
    `low` lowers the working Dmax by one, above `high` raises it by one (within [Dmin, Dmax]; the
    paper gives no step size). A step the drafter proposes nothing in (`root` None) counts as
    accepted length 0 and leaves alpha as it was.
    """

    name = "sage"
    params = (
        Param("sage_d_min", int, 3, "Dmin, the least depth", low=1, arg="d_min"),
        SAGE_D_MAX,
        Param("sage_w_min", int, 2, "Wmin, the least width", low=1, arg="w_min"),
        Param("sage_w_max", int, 10, "Wmax, the greatest width", low=1, arg="w_max"),
        Param("sage_k", int, 10, "the top-k whose entropy gives the confidence", low=1, arg="k"),
        Param("sage_n_max", int, 64, "N_max, the most nodes of a tree", low=1, arg="n_max"),
        Param("sage_window", int, 10, "steps of history tracking", low=1, arg="window"),
        Param("sage_low", NUMBER, 2.0, "mean accepted length that lowers Dmax", arg="low"),
        Param("sage_high", NUMBER, 3.0, "mean accepted length that raises Dmax", low=1, arg="high"),
    )
    description = "SAGE's entropy-adaptive tree"
    source = "SAGE, Section 5.1"

    d_min: int = 3
    d_max: int = 8
    w_min: int = 2
    w_max: int = 10
    k: int = 10
    n_max: int = 64
    window: int = 10
    low: float = 2.0
    high: float = 3.0

    @classmethod
    def max_depth(cls, spec: Values) -> int | None:
        return spec.of(SAGE_D_MAX)

    alpha: float | None = field(default=None, init=False)  # None: the first step
    working_d_max: int = field(default=0, init=False)
    accepted: list[int] = field(default_factory=list, init=False)
    first_tree: StaticTree = field(default_factory=lambda: StaticTree(EAGLE_TREE), init=False)

    def __post_init__(self):
        self.start()

    def start(self) -> None:
        self.alpha, self.working_d_max, self.accepted = None, self.d_max, []

    def observe(self, accepted: int) -> None:
        self.accepted.append(accepted)

    def shape(self, alpha: float, d_max: int) -> tuple[int, float]:
        """(depth D(alpha), width W(alpha)) for the working Dmax."""
        depth = round(self.d_min + alpha * (d_max - self.d_min))
        return max(1, depth), self.w_min + (1 - alpha) * (self.w_max - self.w_min)

    def confidence(self, q: torch.Tensor) -> float:
        """alpha = 1 - H(renormalised top-k of q) / log k."""
        top = q.topk(min(self.k, q.shape[-1])).values.double()
        top = top / top.sum()
        entropy = float(-(torch.xlogy(top, top)).sum())
        return 1.0 - entropy / math.log(self.k)

    def propose(self, drafter, sampler, room: int) -> Proposal:
        recent = self.accepted[-self.window :]
        if len(recent) == self.window:
            mean = sum(recent) / len(recent)
            if mean < self.low:
                self.working_d_max = max(self.d_min, self.working_d_max - 1)
            elif mean > self.high:
                self.working_d_max = min(self.d_max, self.working_d_max + 1)
        if self.alpha is None:
            root = _Recorded(drafter)
            tree = self.first_tree.propose(root, sampler, room)
            if root.q is not None:
                self.alpha = self.confidence(root.q)
            return tree
        depth, width = self.shape(self.alpha, self.working_d_max)
        root_q = drafter.root(sampler)
        if root_q is None:
            return Proposal()
        self.alpha = self.confidence(root_q)
        return self._grow(drafter, root_q, depth, width, room)

    def _grow(self, drafter, root_q, depth: int, width: float, room: int) -> Proposal:
        tree, prob = Proposal(), []

        def children(parent: int, level: int) -> int:
            """How many children a node of `level` may take (before the threshold)."""
            parent_prob = 1.0 if parent == ROOT else prob[parent]
            if level == 1:
                k = max(1, round(width))
            else:
                k = max(1, round(width / level * (0.5 + parent_prob)))
            return min(k, self.n_max - len(tree.tokens))

        def add_children(parent: int, tokens: list, logq: list, k: int, level: int) -> list[int]:
            parent_prob = 1.0 if parent == ROOT else prob[parent]
            added = []
            for rank, (t, lq) in enumerate(zip(tokens[:k], logq[:k], strict=True)):
                path_prob = parent_prob * math.exp(lq)
                if path_prob <= 0.1 * level / depth and not (level == 1 and rank == 0):
                    break  # children come best first: the rest are below the threshold too
                added.append(tree.add(t, parent))
                prob.append(path_prob)
            return added

        k = children(ROOT, 1)
        level = add_children(ROOT, *_top(root_q, k), k, 1) if k > 0 else []
        for lvl in range(2, min(depth, room) + 1):
            if not level or len(tree.tokens) >= self.n_max:
                break
            ks = [children(c, lvl) for c in level]  # from the parents' probabilities alone
            q = drafter.expand(tree, level)
            if q is None:
                break  # the drafter stops
            tokens, logq = _top(q, max(ks))
            nxt = []
            for c, k, child_tokens, child_logq in zip(level, ks, tokens, logq, strict=True):
                k = min(k, self.n_max - len(tree.tokens))  # the budget shrinks as nodes join
                if k > 0:
                    nxt += add_children(c, child_tokens, child_logq, k, lvl)
            level = nxt
        return tree


class _Recorded:
    """A drafter seen through a policy that also needs the first position's distribution."""

    def __init__(self, drafter):
        self.drafter, self.q = drafter, None

    def root(self, sampler) -> torch.Tensor:
        self.q = self.drafter.root(sampler)
        return self.q

    def expand(self, tree, nodes):
        return self.drafter.expand(tree, nodes)


def full_tree(width: int, depth: int) -> list[tuple[int, ...]]:
    """Every path of `depth` levels with `width` children per node (width**1 + ... nodes)."""
    paths, level = [], [()]
    for _ in range(depth):
        level = [p + (r,) for p in level for r in range(width)]
        paths += level
    return paths
