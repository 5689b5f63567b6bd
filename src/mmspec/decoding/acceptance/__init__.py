"""Acceptance rules: how the target's verification pass judges a proposal.

A rule takes the proposal, the target's logits at [root, node_0, ..., node_{n-1}] (row 0
predicts the first node; row i + 1 what follows node i), the temperature and a sampler, and
returns the accepted path (node indices, root excluded) and the next token the target emits after
it (correction or bonus). Each rule declares whether it preserves the target's distribution
(`methods.components.ACCEPTANCE` lists them; lossless ones are checked against AR and by
`mmspec verify-lossless`). A rule reads the hyperparameters of its method named in
`components.ACCEPTANCE_KEYS`; LANTERN also reads the target's codebook (`make_rule`), LVSpec
the target's hidden states (`reads_hidden`: the drafted nodes' from the verification forward and
the visual tokens' from the prefill, passed as `hidden` and `visual`). A lossy rule returns a
third value, the number of accepted nodes it relaxed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.lantern import Neighbours, accept_lantern
from mmspec.decoding.acceptance.loose import (
    accept_fly,
    accept_fly_gate,
    accept_lvspec,
    accept_random_relax,
)
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.methods.components import ACCEPTANCE, ACCEPTANCE_KEYS, CODEBOOK_RULES, VISUAL_RULES


@dataclass(frozen=True)
class AcceptanceRule:
    name: str
    # (proposal, logits, temperature, sampler, **params) -> (path, next token)
    judge: Callable
    lossless: bool
    params: dict = field(default_factory=dict)  # the method's hyperparameters the rule reads

    @property
    def reads_hidden(self) -> bool:
        return self.name in VISUAL_RULES

    def verdict(self, proposal, logits, temperature, sampler, **states):
        """(path, next token, relaxed nodes); `states`: hidden and visual, for `reads_hidden`."""
        out = self.judge(proposal, logits, temperature, sampler, **self.params, **states)
        return out if len(out) == 3 else (*out, 0)

    def __call__(self, proposal, logits, temperature, sampler, **states):
        """(path, next token)."""
        return self.verdict(proposal, logits, temperature, sampler, **states)[:2]


RULES = {
    rule.name: rule
    for rule in [
        AcceptanceRule("greedy", accept_greedy, lossless=True),
        AcceptanceRule("sampling", accept_sampling, lossless=True),
        AcceptanceRule("lantern", accept_lantern, lossless=False),
        AcceptanceRule("lvspec", accept_lvspec, lossless=False),
        AcceptanceRule("fly", accept_fly, lossless=False),
        AcceptanceRule("fly_gate", accept_fly_gate, lossless=False),
        AcceptanceRule("random_relax", accept_random_relax, lossless=False),
    ]
}
assert {n: r.lossless for n, r in RULES.items()} == ACCEPTANCE


def make_rule(spec: dict | str, codebook=None) -> AcceptanceRule:
    """The acceptance rule of a method spec (or a rule name), with its hyperparameters.

    `codebook`: (code vectors [codes, dim], vocabulary id of code 0) of the target's VQ
    tokenizer, for rules that relax over latent neighbours (LANTERN builds its table from it)."""
    spec = {"acceptance": spec} if isinstance(spec, str) else spec
    name = spec["acceptance"]
    if name not in RULES:
        raise ValueError(f"unknown acceptance rule {name!r}; known: {sorted(RULES)}")
    params = {key: spec[key] for key in ACCEPTANCE_KEYS[name]}
    if name in CODEBOOK_RULES:
        if codebook is None:
            raise ValueError(
                f"acceptance {name!r} relaxes over the target's VQ codebook, and this target has "
                "none (an image-generating target with a VQ tokenizer is needed)"
            )
        vectors, offset = codebook
        params["neighbours"] = Neighbours(vectors, offset, params["lantern_k"], params["proximity"])
    return AcceptanceRule(name, RULES[name].judge, RULES[name].lossless, params)
