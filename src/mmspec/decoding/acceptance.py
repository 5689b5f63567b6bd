"""Acceptance rules: how the target's verification pass judges a proposal.

A rule takes the proposal and the target's logits at [root, node_0, ..., node_{n-1}] (row 0
predicts the first node; row i+1 predicts what follows node i) and returns the accepted path
(node indices, root excluded) and the next token the target emits after it (correction or bonus).
"""

from __future__ import annotations

import torch

from mmspec.decoding.proposal import ROOT, Proposal


def distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at `temperature` (> 0) in float32."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """Argmax at temperature 0, else one sample at `temperature`."""
    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(distribution(logits, temperature), 1, generator=generator))


def accept_greedy(proposal: Proposal, logits: torch.Tensor, temperature, generator):
    """Follow the target's argmax down the tree while a child matches it; then emit the argmax.

    For a chain this is the longest prefix equal to the target's argmax.
    """
    target = logits.argmax(dim=-1)
    if proposal.is_chain:
        drafted = proposal.tokens_tensor(target.device)
        matches = (drafted == target[: len(drafted)]).int()
        n = int(matches.cumprod(0).sum())
        return list(range(n)), int(target[n])
    children, path, node = proposal.children(), [], ROOT
    while True:
        want = int(target[node + 1])
        match = [c for c in children.get(node, []) if proposal.tokens[c] == want]
        if not match:
            return path, want
        node = match[0]
        path.append(node)


def accept_sampling(proposal: Proposal, logits: torch.Tensor, temperature, generator):
    """Lossless rejection sampling, recursive over siblings for trees.

    Chain (Leviathan et al. 2023; Chen et al. 2023): accept draft token x with probability
    min(1, p(x)/q(x)); on the first rejection emit a token from norm(max(0, p - q)); when all are
    accepted, emit a bonus token from p. Tree (SpecInfer; recursive rejection sampling over
    children drawn without replacement from q): try the children in order; after rejecting x,
    p <- norm(max(0, p - q)) and q <- q without x, renormalised; accepting one descends into it;
    if every child is rejected, emit a token from the last p.
    """
    if temperature == 0:
        return accept_greedy(proposal, logits, temperature, generator)
    p_rows = distribution(logits, temperature)
    children, path, node = proposal.children(), [], ROOT
    while True:
        p, accepted = p_rows[node + 1], None
        kids = children.get(node, [])
        q = proposal.q[kids[0]].float() if kids else None
        for child in kids:
            token = proposal.tokens[child]
            # accept with probability min(1, p/q); q(token) > 0 since token was drawn from q
            if float(torch.rand((), generator=generator)) * float(q[token]) < float(p[token]):
                accepted = child
                break
            p = _residual(p, q)
            q = q.clone()
            q[token] = 0
            if q.sum() <= 0:
                break
            q = q / q.sum()
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=generator))
        path.append(accepted)
        node = accepted


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); p itself when the difference has no mass (p == q up to rounding)."""
    residual = (p - q).clamp_min(0)
    total = residual.sum()
    return residual / total if total > 0 else p


RULES = {"greedy": accept_greedy, "sampling": accept_sampling}


def make_rule(name: str):
    if name not in RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; known: {sorted(RULES)}")
    return RULES[name]
