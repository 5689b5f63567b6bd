"""Speculative sampling of a drawn chain, written out plainly (Leviathan et al. 2023, Alg. 1).

At temperature 0 the draft's argmax chain is accepted while it matches the target's argmax. At
temperature > 0 each drafted token x_i (drawn from q_i) is accepted with probability
min(1, p_i(x_i) / q_i(x_i)); at the first rejection a token is drawn from norm(max(0, p_i - q_i));
a fully accepted chain ends with a token drawn from the next p. Lossless: the output has the
target's distribution exactly (`mmspec verify-lossless` enumerates it). Chains only.
"""

from __future__ import annotations

from mmspec.api import AcceptanceRule, Values, distribution


def accept_leviathan(proposal, logits, temperature, sampler):
    if not proposal.is_chain:
        raise ValueError("leviathan verifies chains (tree: chain)")
    n = len(proposal.tokens)
    if temperature == 0:
        target = logits.argmax(-1).tolist()
        k = 0
        while k < n and proposal.tokens[k] == target[k]:
            k += 1
        return list(range(k)), target[k]
    p = distribution(logits, temperature)
    q = proposal.q.to(p.dtype)
    for i, token in enumerate(proposal.tokens):
        if not sampler.accept(float(p[i, token] / q[i, token])):
            residual = (p[i] - q[i]).clamp_min(0)
            total = residual.sum()
            return list(range(i)), sampler.categorical(residual / total if total > 0 else p[i])
    return list(range(n)), sampler.categorical(p[n])


class Leviathan(AcceptanceRule):
    name = "leviathan"
    lossless = True
    description = "speculative sampling of a drawn chain (Leviathan et al. 2023)"
    judge = staticmethod(accept_leviathan)

    @classmethod
    def check(cls, spec: Values) -> None:
        if spec.tree != "chain":
            raise ValueError(f"acceptance 'leviathan' verifies chains, not tree {spec.tree!r}")
