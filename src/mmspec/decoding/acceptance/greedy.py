"""Greedy acceptance: the longest drafted path that equals the target's argmax."""

from __future__ import annotations

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.rule import Rule
from mmspec.decoding.lazy import torch
from mmspec.decoding.proposal import ROOT, Proposal


def accept_greedy(proposal: Proposal, logits: torch.Tensor, temperature, sampler):
    """Follow the target's argmax down the tree while a child matches it; then emit the argmax.

    The argmaxes come to the host in one copy (on a GPU each further read of a device tensor is a
    synchronisation, which at batch 1 costs about what the comparison does).
    """
    target = logits.argmax(dim=-1).tolist()
    if proposal.is_chain:
        n = 0
        for drafted, want in zip(proposal.tokens, target, strict=False):
            if drafted != want:
                break
            n += 1
        return list(range(n)), target[n]
    children, path, node = proposal.children(), [], ROOT
    while True:
        want = target[node + 1]
        match = [c for c in children.get(node, []) if proposal.tokens[c] == want]
        if not match:
            return path, want
        node = match[0]
        path.append(node)


@catalog.register
class Greedy(Rule):
    """Argmax match: the target's greedy output, token for token."""

    name = "greedy"
    lossless = True
    judge = staticmethod(accept_greedy)
