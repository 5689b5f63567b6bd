"""Tree policies: the shape of what a drafter proposes at each step."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mmspec.decoding.proposal import ROOT, Proposal


@dataclass
class ChainPolicy:
    """chain(gamma): gamma tokens in a line (standard speculative decoding)."""

    gamma: int

    def propose(self, drafter, generator: torch.Generator | None) -> Proposal:
        return drafter.propose_chain(self.gamma, generator)


@dataclass
class StaticTree:
    """A fixed tree given as paths of child ranks (the Medusa/EAGLE "choices" format).

    (0,) is the draft's best first token, (1,) its second best, (0, 1) the second-best
    continuation of (0,), and so on; at temperature > 0 rank r is the r-th draw without
    replacement. Every prefix of a path must be a path, and the ranks under one parent must be
    0..k-1 (recursive rejection sampling verifies consecutive draws).
    """

    paths: list[tuple[int, ...]]
    parents: list[int] = field(init=False)
    depths: list[int] = field(init=False)
    ranks: list[int] = field(init=False)

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
            if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in index:
                raise ValueError(f"tree path {list(p)}: sibling ranks must be 0..k-1")
        self.paths = paths
        self.parents = [index[p[:-1]] if len(p) > 1 else ROOT for p in paths]
        self.depths = [len(p) for p in paths]
        self.ranks = [p[-1] for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def propose(self, drafter, generator: torch.Generator | None) -> Proposal:
        return drafter.propose_tree(self, generator)


@dataclass
class DynamicTree:
    """EAGLE-2's dynamic tree: expand the top_k best nodes per level for `depth` levels (each
    with its top_k children), then keep the `total_tokens` nodes of highest cumulative draft
    log-probability (ancestors always kept)."""

    depth: int
    top_k: int
    total_tokens: int

    def propose(self, drafter, generator: torch.Generator | None) -> Proposal:
        return drafter.propose_dynamic(self, generator)


@dataclass
class SageTree:
    """SAGE's entropy-adaptive tree (arXiv 2025, section 3; defaults from its section 5).

    Confidence alpha = 1 - H / log k of the draft's renormalised top-k at the first draft
    position; the alpha of step t shapes step t+1 (0.5 at the start). Depth D = Dmin + alpha
    (Dmax - Dmin), width W = Wmin + (1 - alpha)(Wmax - Wmin); level 1 takes W children, a node at
    level l >= 2 W (1/l)(0.5 + P_parent) (P_parent: the parent's path probability); a node is kept
    while its path probability exceeds 0.1 l / D; growth stops at level D or n_max nodes. History:
    once `window` steps are in, a mean accepted length below `low` lowers the working Dmax by one,
    above `high` raises it by one (within [Dmin, the configured Dmax]).
    """

    d_min: int = 3
    d_max: int = 8
    w_min: int = 2
    w_max: int = 10
    k: int = 10
    n_max: int = 64
    window: int = 10
    low: float = 2.0
    high: float = 3.0

    def shape(self, alpha: float, d_max: int) -> tuple[int, float]:
        """(depth D(alpha), width W(alpha)) for the working Dmax."""
        depth = round(self.d_min + alpha * (d_max - self.d_min))
        return max(1, depth), self.w_min + (1 - alpha) * (self.w_max - self.w_min)

    def confidence(self, q: torch.Tensor) -> float:
        """alpha = 1 - H(renormalised top-k of q) / log k."""
        top = q.topk(min(self.k, q.shape[-1])).values.float()
        top = top / top.sum()
        entropy = float(-(torch.xlogy(top, top)).sum())
        return 1.0 - entropy / math.log(self.k)

    def propose(self, drafter, generator: torch.Generator | None) -> Proposal:
        state = drafter.tree_state
        alpha, d_max = state.get("alpha", 0.5), state.get("d_max", self.d_max)
        recent = drafter.accepted_lengths[-self.window :]
        if len(recent) == self.window:
            mean = sum(recent) / len(recent)
            if mean < self.low:
                d_max = max(self.d_min, d_max - 1)
            elif mean > self.high:
                d_max = min(self.d_max, d_max + 1)
        depth, width = self.shape(alpha, d_max)

        def children(level: int, parent_prob: float) -> int:
            if level == 1:
                return max(1, round(width))
            return max(1, round(width / level * (0.5 + parent_prob)))

        proposal = drafter.propose_grown(
            children, lambda level: 0.1 * level / depth, depth, self.n_max, generator
        )
        state.update(alpha=self.confidence(drafter.root_q), d_max=d_max, depth=depth)
        return proposal


def full_tree(width: int, depth: int) -> list[tuple[int, ...]]:
    """Every path of `depth` levels with `width` children per node (width**1 + ... nodes)."""
    paths, level = [], [()]
    for _ in range(depth):
        level = [p + (r,) for p in level for r in range(width)]
        paths += level
    return paths


def make_tree_policy(spec: dict):
    if spec["tree"] == "chain":
        return ChainPolicy(int(spec["gamma"]))
    if spec["tree"] == "static":
        return StaticTree([tuple(p) for p in spec["paths"]])
    if spec["tree"] == "dynamic":
        return DynamicTree(int(spec["depth"]), int(spec["top_k"]), int(spec["total_tokens"]))
    if spec["tree"] == "sage":
        return SageTree(**{k: spec[f"sage_{k}"] for k in SAGE_KEYS if f"sage_{k}" in spec})
    raise ValueError(f"unknown tree policy {spec['tree']!r}; known: chain, static, dynamic, sage")


# the SageTree fields a method spec sets as `sage_<field>`
SAGE_KEYS = ("d_min", "d_max", "w_min", "w_max", "k", "n_max", "window", "low", "high")
