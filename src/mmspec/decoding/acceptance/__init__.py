"""Acceptance rules: how the target's verification pass judges a proposal.

A rule takes the proposal, the target's logits at [root, node_0, ..., node_{n-1}] (row 0
predicts the first node; row i + 1 what follows node i), the temperature and a sampler, and
returns the accepted path (node indices, root excluded) and the next token the target emits after
it (correction or bonus). Each rule declares whether it preserves the target's distribution
(`methods.components.ACCEPTANCE` lists them; lossless ones are checked against AR and by
`mmspec verify-lossless`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.methods.components import ACCEPTANCE


@dataclass(frozen=True)
class AcceptanceRule:
    name: str
    judge: Callable  # (proposal, logits, temperature, sampler) -> (path, next token)
    lossless: bool

    def __call__(self, proposal, logits, temperature, sampler):
        return self.judge(proposal, logits, temperature, sampler)


RULES = {
    rule.name: rule
    for rule in [
        AcceptanceRule("greedy", accept_greedy, lossless=True),
        AcceptanceRule("sampling", accept_sampling, lossless=True),
    ]
}
assert {n: r.lossless for n, r in RULES.items()} == ACCEPTANCE


def make_rule(name: str) -> AcceptanceRule:
    if name not in RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; known: {sorted(RULES)}")
    return RULES[name]
