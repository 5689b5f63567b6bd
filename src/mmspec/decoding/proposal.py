"""A drafter's proposal: a token tree (a chain is the tree whose parents are 0, 1, 2, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROOT = -1  # parent index of depth-1 nodes: the last token the target emitted


@dataclass
class Proposal:
    """Draft nodes in topological order; `q[i]` is the draft distribution node i was drawn from.

    Siblings share their parent's distribution and, when sampled, are drawn from it without
    replacement, in proposal order (what recursive rejection sampling requires).
    """

    tokens: list[int]
    parents: list[int]
    q: torch.Tensor | None = None  # [n, V] at the decoding temperature; None for greedy drafts

    @classmethod
    def chain(cls, tokens: list[int], q: torch.Tensor | None = None) -> Proposal:
        return cls(tokens, [ROOT] + list(range(len(tokens) - 1)), q)

    @property
    def is_chain(self) -> bool:
        return self.parents == [ROOT] + list(range(len(self.tokens) - 1))

    def children(self) -> dict[int, list[int]]:
        """Parent -> its child nodes in proposal order (ROOT for depth-1 nodes)."""
        out: dict[int, list[int]] = {}
        for i, parent in enumerate(self.parents):
            out.setdefault(parent, []).append(i)
        return out

    def depths(self) -> list[int]:
        """Depth of each node (1 for the root's children)."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent == ROOT else out[parent] + 1)
        return out

    def shape(self) -> tuple[int, int]:
        """(depth, width): the deepest level and the most nodes on one level."""
        depths = self.depths()
        return max(depths), max(depths.count(d) for d in set(depths))

    def tokens_tensor(self, device) -> torch.Tensor:
        return torch.tensor(self.tokens, dtype=torch.long, device=device)

    def attention(self) -> torch.Tensor | None:
        """[n+1, n+1] visibility among root + nodes (each sees its ancestors); None for chains."""
        if self.is_chain:
            return None
        n = len(self.tokens) + 1
        allowed = torch.eye(n, dtype=torch.bool)
        allowed[:, 0] = True
        for i, parent in enumerate(self.parents):
            allowed[i + 1] |= allowed[parent + 1]
        return allowed
