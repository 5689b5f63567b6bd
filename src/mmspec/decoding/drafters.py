"""Drafters: propose tokens for the target to verify.

`ModelDrafter` runs a small draft model over one view of the prompt with its own KV cache. Its
cache always holds the committed text except the `pending` tokens, which are fed at the start of
the next proposal (the target's correction/bonus token, plus the last draft token when a whole
chain was accepted).
"""

from __future__ import annotations

import time

import torch

from mmspec.decoding.acceptance import distribution, pick
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.timing import sync


class ModelDrafter:
    """A draft model drafting from one view; counts its forwards and their time (for T_q)."""

    def __init__(self, decoder: Decoder, temperature: float):
        self.decoder = decoder
        self.temperature = temperature
        self.pending: list[int] = []
        self.base = 0  # cache length before the current proposal's pending tokens
        self.fed: list[int] = []  # tokens appended to the cache during the current proposal
        self.forwards = 0
        self.forward_s = 0.0

    def start(self, embeds: torch.Tensor, first_token: int) -> None:
        self.decoder.prefill(embeds)
        self.pending = [first_token]

    def _extend(self, tokens: list[int]) -> torch.Tensor:
        start = time.perf_counter()
        logits = self.decoder.extend(tokens).logits[-1]
        sync(self.decoder.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        self.fed.extend(tokens)
        return logits

    def propose_chain(self, gamma: int, generator: torch.Generator | None) -> Proposal:
        """gamma tokens, each from the draft's next-token distribution (gamma forwards)."""
        self.base, self.fed = self.decoder.length, []
        logits = self._extend(self.pending)
        tokens, qs = [], []
        for i in range(gamma):
            token = pick(logits, self.temperature, generator)
            tokens.append(token)
            if self.temperature > 0:
                qs.append(distribution(logits, self.temperature))
            if i < gamma - 1:
                logits = self._extend([token])
        return Proposal.chain(tokens, torch.stack(qs) if qs else None)

    def commit(self, proposal: Proposal, path: list[int], next_token: int) -> None:
        """Keep the accepted path in the cache; queue what the cache still lacks."""
        n_pending = len(self.fed) - (len(proposal.tokens) - 1)
        cached_nodes = [i for i in path if i < len(proposal.tokens) - 1]
        self.decoder.keep(self.base, list(range(n_pending)) + [n_pending + i for i in cached_nodes])
        missing = [proposal.tokens[i] for i in path if i >= len(proposal.tokens) - 1]
        self.pending = missing + [next_token]
