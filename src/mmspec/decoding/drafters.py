"""Drafters: propose tokens for the target to verify.

`ModelDrafter` runs a small draft model over m views of the prompt at once: one batched forward
per draft step (parameters shared, one KV-cache row per view, left padding masked). The views'
next-token distributions are mixed with the weights its policy picked for the block; the next
token comes from the mixture and is appended to every view. With one view this is plain
single-view drafting (the mixture is the view's own distribution).

Its cache always holds the committed text except the `pending` tokens, which are fed at the start
of the next proposal (the target's correction/bonus token, plus the last draft token when a whole
chain was accepted).
"""

from __future__ import annotations

import time

import torch

from mmspec.decoding.acceptance import distribution
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.timing import sync
from mmspec.decoding.weights import History, StaticWeights, weight_grid


class ModelDrafter:
    """A draft model drafting from one or more views; counts its forwards and their time (T_q)."""

    def __init__(self, decoder: Decoder, temperature: float, policy=None, window: int = 0):
        self.decoder = decoder
        self.temperature = temperature
        # Views' distributions are mixed as probabilities: at the sampling temperature, or at 1
        # for greedy drafting (argmax of the mixture, as in TABED's released code).
        self.mix_temperature = temperature if temperature > 0 else 1.0
        self.policy = policy or StaticWeights()
        self.window = window
        self.history: History | None = None
        self.weights = torch.ones(1)
        self.view_probs: list[torch.Tensor] = []  # [m, V] per drafted node of this proposal
        self.pending: list[int] = []
        self.base = 0  # cache length before the current proposal's pending tokens
        self.fed: list[int] = []  # tokens appended to the cache during the current proposal
        self.forwards = 0
        self.forward_s = 0.0

    @property
    def views(self) -> int:
        return self.decoder.rows

    def start(self, prompts: list[torch.Tensor], first_token: int) -> None:
        """Prefill one cache row per view; the target's first token is fed with the first draft."""
        self.decoder.prefill(prompts)
        self.pending = [first_token]
        grid = weight_grid(len(prompts)) if self.policy.uses_grid else None
        self.history = History(self.window, grid)

    def _extend(self, tokens: list[int]) -> torch.Tensor:
        """Feed tokens to every view; the views' next-token logits [m, V]."""
        start = time.perf_counter()
        logits = self.decoder.extend(tokens).logits[:, -1]
        sync(self.decoder.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        self.fed.extend(tokens)
        return logits

    def _next(self, logits: torch.Tensor, generator) -> tuple[int, torch.Tensor | None]:
        """The next draft token from the views' logits, and the mixture q it came from."""
        if self.views == 1 and not self.policy.needs_history:
            if self.temperature == 0:
                return int(logits[0].argmax()), None
            q = distribution(logits[0], self.temperature)
            return int(torch.multinomial(q, 1, generator=generator)), q
        probs = distribution(logits, self.mix_temperature)
        if self.policy.needs_history:
            self.view_probs.append(probs)
        q = self.weights.to(probs.device) @ probs
        if self.temperature == 0:
            return int(q.argmax()), q
        return int(torch.multinomial(q, 1, generator=generator)), q

    def propose_chain(self, gamma: int, generator: torch.Generator | None) -> Proposal:
        """gamma tokens, each from the weighted mixture of the views (gamma batched forwards)."""
        self.weights = self.policy.choose(self.history, self.views, generator).float()
        self.view_probs = []
        self.base, self.fed = self.decoder.length, []
        logits = self._extend(self.pending)
        tokens, qs = [], []
        for i in range(gamma):
            token, q = self._next(logits, generator)
            tokens.append(token)
            if self.temperature > 0:
                qs.append(q)
            if i < gamma - 1:
                logits = self._extend([token])
        return Proposal.chain(tokens, torch.stack(qs) if qs else None)

    def commit(
        self, proposal: Proposal, path: list[int], next_token: int, target_logits: torch.Tensor
    ) -> None:
        """Keep the accepted path in the cache, queue what it lacks, and update the history.

        `target_logits` are the verification logits (row i predicts node i of a chain); the
        history gains the accepted positions and the first rejected one.
        """
        n_pending = len(self.fed) - (len(proposal.tokens) - 1)
        cached_nodes = [i for i in path if i < len(proposal.tokens) - 1]
        self.decoder.keep(self.base, list(range(n_pending)) + [n_pending + i for i in cached_nodes])
        missing = [proposal.tokens[i] for i in path if i >= len(proposal.tokens) - 1]
        self.pending = missing + [next_token]
        if self.view_probs:
            if not proposal.is_chain:
                raise NotImplementedError("ensemble weight history is implemented for chains")
            seen = min(len(path) + 1, len(self.view_probs))
            p = distribution(target_logits[:seen], self.mix_temperature)
            self.history.observe(p, torch.stack(self.view_probs[:seen]))
