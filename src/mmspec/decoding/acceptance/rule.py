"""The base of every acceptance rule: a component (`decoding.component.AcceptanceRule`) holding
its method's hyperparameters, whose `judge` function decides each proposal."""

from __future__ import annotations

from mmspec.decoding.component import HIDDEN_STATES, AcceptanceRule, Values


class Rule(AcceptanceRule):
    """A rule with its method's hyperparameters: `verdict` judges one proposal."""

    def __init__(self, **params):
        # its own values, by each `Param.key` (not `Param.arg`), passed to `judge` as keywords
        self.params = params

    @classmethod
    def from_spec(cls, spec: Values, codebook=None) -> Rule:
        """The rule holding its own values (`spec`); `codebook`: the target's VQ codebook
        (read by rules that relax over it: LANTERN; None where the target has none)."""
        return cls(**spec)

    @property
    def reads_hidden(self) -> bool:
        """Whether it reads the target's hidden states (passed as `hidden` and `visual`)."""
        return HIDDEN_STATES in self.requires

    @staticmethod
    def judge(proposal, logits, temperature, sampler, **params):
        """Decide one proposal: `(path, next_token)` or `(path, next_token, relaxed)`.

        `proposal`: the step's `Proposal` (empty when the drafter proposed nothing);
        `logits` [1 + n, V]: the target's verification logits, row 0 after the last emitted
        token, row i + 1 after node i; `temperature`: the sampling temperature (0: greedy);
        `sampler`: the engine's `Sampler` (every random choice goes through it);
        `params`: the rule's own values by key (its spec), plus `hidden` and `visual` for a
        rule requiring `hidden_states`. Returns `path`, a list of node indices from a
        depth-1 node down, each the child of the one before ([] when none is accepted);
        `next_token`, an int, the token emitted after them (the correction or the bonus); and
        optionally `relaxed`, an int: how many of the accepted nodes only a relaxation
        accepted (those the lossless rule would have rejected; 0 when omitted), which the
        cells table reports as `relaxed_share`."""
        raise NotImplementedError("an acceptance rule defines `judge` (mmspec.api.AcceptanceRule)")

    def verdict(self, proposal, logits, temperature, sampler, **states):
        """(path, next token, relaxed count); `states`: hidden and visual, for `reads_hidden`."""
        out = self.judge(proposal, logits, temperature, sampler, **self.params, **states)
        return out if len(out) == 3 else (*out, 0)

    def __call__(self, proposal, logits, temperature, sampler, **states):
        """(path, next token)."""
        return self.verdict(proposal, logits, temperature, sampler, **states)[:2]
