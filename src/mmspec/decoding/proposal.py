"""A drafter's proposal: a token tree (a chain is the tree whose parents are ROOT, 0, 1, ...).

An empty proposal (no node: the drafter proposed nothing) is a chain of length 0: the target
verifies the last emitted token alone."""

from __future__ import annotations

from dataclasses import dataclass, field

from mmspec.decoding.lazy import torch

ROOT = -1  # parent index of depth-1 nodes: the last token the target emitted


@dataclass
class Proposal:
    """Draft nodes in topological order (each node after its parent).

    `q[i]` is the draft distribution node i was drawn from, for a chain drawn at temperature > 0;
    None when the nodes were chosen deterministically from the draft (top-k: every tree, and
    greedy drafting), which acceptance then verifies as point masses. `drafted_as[i]` is node i's
    index in the tree the drafter grew (policies that grow candidates and keep a subset, e.g.
    EAGLE-2); None when the proposal is that tree itself.
    """

    tokens: list[int] = field(default_factory=list)  # node i's token
    parents: list[int] = field(default_factory=list)  # node i's parent's index (ROOT: depth 1)
    q: torch.Tensor | None = None  # [n, V]
    drafted_as: list[int] | None = None

    @classmethod
    def chain(cls, tokens: list[int], q: torch.Tensor | None = None) -> Proposal:
        """The chain of `tokens` (node i the parent of node i + 1), drawn from `q` if given."""
        return cls(list(tokens), list(range(ROOT, len(tokens) - 1)), q)

    def add(self, token: int, parent: int) -> int:
        """Append a node under `parent`; its index."""
        self.tokens.append(int(token))
        self.parents.append(parent)
        return len(self.tokens) - 1

    def subset(self, keep) -> Proposal:
        """The nodes `keep` (each with its parent kept) re-indexed topologically by depth."""
        depths = self.depths()
        order = sorted(keep, key=lambda i: (depths[i], i))
        index = {node: i for i, node in enumerate(order)}
        parents = [ROOT if self.parents[n] == ROOT else index[self.parents[n]] for n in order]
        return Proposal([self.tokens[n] for n in order], parents, None, order)

    def drafted_index(self, node: int) -> int:
        """Node `node`'s index in the tree the drafter grew (itself unless a subset)."""
        return node if self.drafted_as is None else self.drafted_as[node]

    @property
    def is_chain(self) -> bool:
        """Whether each node is the only child of the one before (an empty proposal is one)."""
        return self.parents == list(range(ROOT, len(self.tokens) - 1))

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

    def ancestors(self, node: int) -> list[int]:
        """The proper ancestors of `node`, nearest first."""
        out, parent = [], self.parents[node]
        while parent != ROOT:
            out.append(parent)
            parent = self.parents[parent]
        return out

    def shape(self) -> tuple[int, int]:
        """(depth, width): the deepest level and the most nodes on one level ((0, 0) empty)."""
        depths = self.depths()
        if not depths:
            return 0, 0
        return max(depths), max(depths.count(d) for d in set(depths))

    def tokens_tensor(self, device) -> torch.Tensor:
        """The nodes' tokens as a long tensor [n] on `device`."""
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
