"""Greedy acceptance: the longest drafted path that equals the target's argmax."""

from __future__ import annotations

import torch

from mmspec.decoding.proposal import ROOT, Proposal


def accept_greedy(proposal: Proposal, logits: torch.Tensor, temperature, sampler):
    """Follow the target's argmax down the tree while a child matches it; then emit the argmax.

    For a chain: one comparison over the chain (the matching prefix), as gpt-fast does.
    """
    target = logits.argmax(dim=-1)
    if proposal.is_chain:
        drafted = proposal.tokens_tensor(target.device)
        n = int((drafted == target[: len(drafted)]).int().cumprod(0).sum())
        return list(range(n)), int(target[n])
    children, path, node = proposal.children(), [], ROOT
    while True:
        want = int(target[node + 1])
        match = [c for c in children.get(node, []) if proposal.tokens[c] == want]
        if not match:
            return path, want
        node = match[0]
        path.append(node)
