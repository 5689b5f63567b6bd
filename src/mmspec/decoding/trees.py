"""Tree policies: the shape of what a drafter proposes at each step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.decoding.proposal import Proposal


@dataclass
class ChainPolicy:
    """chain(gamma): gamma tokens in a line (standard speculative decoding)."""

    gamma: int

    def propose(self, drafter, generator: torch.Generator | None) -> Proposal:
        return drafter.propose_chain(self.gamma, generator)

    def draft_forwards(self) -> int:
        return self.gamma


def make_tree_policy(spec: dict):
    if spec["tree"] == "chain":
        return ChainPolicy(int(spec["gamma"]))
    raise ValueError(f"unknown tree policy {spec['tree']!r}; known: ['chain']")
