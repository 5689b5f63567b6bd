"""Acceptance rules: how the target's verification pass judges a proposal.

A rule takes the proposal and the target's logits at [root, node_0, ..., node_{n-1}] (row 0
predicts the first node; row i+1 predicts what follows node i) and returns the accepted path
(node indices, root excluded) and the next token the target emits after it (correction or bonus).
"""

from __future__ import annotations

import torch

from mmspec.decoding.proposal import Proposal


def distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at `temperature` (> 0) in float32."""
    return torch.softmax(logits.float() / temperature, dim=-1)


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """Argmax at temperature 0, else one sample at `temperature`."""
    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial(distribution(logits, temperature), 1, generator=generator))


def accept_greedy(proposal: Proposal, logits: torch.Tensor, temperature, generator):
    """Keep the longest chain prefix that equals the target's argmax; then the target's argmax."""
    _require_chain(proposal, "greedy")
    target = logits.argmax(dim=-1)
    drafted = proposal.tokens_tensor(target.device)
    matches = (drafted == target[: len(drafted)]).int()
    n = int(matches.cumprod(0).sum())
    return list(range(n)), int(target[n])


def accept_sampling(proposal: Proposal, logits: torch.Tensor, temperature, generator):
    """Lossless rejection sampling (Leviathan et al. 2023; Chen et al. 2023) over a chain.

    Accept draft token x with probability min(1, p(x)/q(x)); on the first rejection emit a token
    from norm(max(0, p - q)); when all are accepted, emit a bonus token from p.
    """
    _require_chain(proposal, "sampling")
    if temperature == 0:
        return accept_greedy(proposal, logits, temperature, generator)
    p = distribution(logits, temperature)
    q = proposal.q
    for i, token in enumerate(proposal.tokens):
        ratio = p[i, token] / q[i, token]
        if float(torch.rand((), generator=generator)) < float(ratio):
            continue
        residual = (p[i] - q[i]).clamp_min(0)
        total = residual.sum()
        # total == 0 only if p == q, where rejection has probability 0; guard float noise
        residual = residual / total if total > 0 else p[i]
        return list(range(i)), int(torch.multinomial(residual, 1, generator=generator))
    n = len(proposal.tokens)
    return list(range(n)), int(torch.multinomial(p[n], 1, generator=generator))


def _require_chain(proposal: Proposal, rule: str) -> None:
    if not proposal.is_chain:
        raise NotImplementedError(f"acceptance {rule!r} is implemented for chains only so far")


RULES = {"greedy": accept_greedy, "sampling": accept_sampling}


def make_rule(name: str):
    if name not in RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; known: {sorted(RULES)}")
    return RULES[name]
