"""Tree policies: the shape of what a drafter proposes at each step."""

from __future__ import annotations

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
    raise ValueError(f"unknown tree policy {spec['tree']!r}; known: chain, static, dynamic")
