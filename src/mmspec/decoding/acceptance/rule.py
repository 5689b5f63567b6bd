"""The base of every acceptance rule: a component (`decoding.component.AcceptanceRule`) holding
its method's hyperparameters, whose `judge` function decides each proposal."""

from __future__ import annotations

from mmspec.decoding.component import HIDDEN_STATES, AcceptanceRule


class Rule(AcceptanceRule):
    """A rule with its method's hyperparameters: `verdict` judges one proposal."""

    def __init__(self, **params):
        self.params = params

    @classmethod
    def from_spec(cls, spec: dict, codebook=None) -> Rule:
        """`codebook`: the target's VQ codebook (read by rules that relax over it: LANTERN)."""
        return cls(**spec)

    @property
    def reads_hidden(self) -> bool:
        """Whether it reads the target's hidden states (passed as `hidden` and `visual`)."""
        return HIDDEN_STATES in self.requires

    @staticmethod
    def judge(proposal, logits, temperature, sampler, **params):
        """(accepted path, next token[, relaxed nodes])."""
        raise NotImplementedError

    def verdict(self, proposal, logits, temperature, sampler, **states):
        """(path, next token, relaxed nodes); `states`: hidden and visual, for `reads_hidden`."""
        out = self.judge(proposal, logits, temperature, sampler, **self.params, **states)
        return out if len(out) == 3 else (*out, 0)

    def __call__(self, proposal, logits, temperature, sampler, **states):
        """(path, next token)."""
        return self.verdict(proposal, logits, temperature, sampler, **states)[:2]
