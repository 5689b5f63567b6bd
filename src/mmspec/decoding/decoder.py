"""A causal LM with its own KV cache: the one object the decoding loops talk to.

It wraps the language-model part of any HF model (Llava's `model.model.language_model`, a plain
causal LM's `model.model`) and its `lm_head`. The vision tower is never called here: images
enter as precomputed embeddings spliced into the prompt (see `views`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache


@dataclass
class Forward:
    """What one forward returns: logits [n, V] and last hidden states [n, H] of its n positions."""

    logits: torch.Tensor
    hidden: torch.Tensor


def language_parts(model) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    """(decoder stack, lm_head, input embedding) of a multimodal or text-only HF model."""
    inner = model.model
    stack = getattr(inner, "language_model", inner)
    return stack, model.lm_head, model.get_input_embeddings()


class Decoder:
    """One model's incremental decoding state: a DynamicCache and the number of cached positions."""

    def __init__(self, model):
        self.model = model
        self.stack, self.lm_head, self.embed = language_parts(model)
        self.device = next(model.parameters()).device
        self.cache: DynamicCache | None = None
        self.length = 0

    @torch.inference_mode()
    def prefill(self, embeds: torch.Tensor) -> Forward:
        """Start a fresh cache from prompt embeddings [L, H]; returns the last position only."""
        self.cache = DynamicCache(config=self.stack.config)
        self.length = 0
        out = self._run(embeds.unsqueeze(0))
        return Forward(out.logits[-1:], out.hidden[-1:])

    @torch.inference_mode()
    def extend(self, tokens: list[int] | torch.Tensor, attention: torch.Tensor | None = None):
        """Append tokens to the cache; returns logits/hidden for each of them.

        `attention` ([n, n] bool, True = may attend) restricts how the new tokens see each other
        (token trees); every new token always sees the whole cache.
        """
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device).view(1, -1)
        return self._run(self.embed(ids), attention)

    def _run(self, embeds: torch.Tensor, attention: torch.Tensor | None = None) -> Forward:
        n = embeds.shape[1]
        positions = torch.arange(self.length, self.length + n, device=self.device).unsqueeze(0)
        mask = None
        if attention is not None:
            # A 4D additive mask over (cache + new) keys; the cache part is fully visible.
            allowed = torch.ones(n, self.length + n, dtype=torch.bool, device=self.device)
            allowed[:, self.length :] = attention
            mask = torch.zeros(allowed.shape, dtype=embeds.dtype, device=self.device)
            mask.masked_fill_(~allowed, torch.finfo(embeds.dtype).min)
            mask = mask.view(1, 1, n, self.length + n)
        out = self.stack(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[0]
        self.length += n
        return Forward(self.lm_head(hidden), hidden)

    def truncate(self, length: int) -> None:
        """Drop cached positions beyond `length` (rejected draft tokens)."""
        if length < self.length:
            # DynamicCache.crop takes a negative count to remove in transformers 5.
            self.cache.crop(length - self.length)
            self.length = length

    def keep(self, base: int, offsets: list[int]) -> None:
        """Keep cached positions [0, base) plus base + offsets (a tree path), compacted in order."""
        if offsets == list(range(len(offsets))):
            self.truncate(base + len(offsets))
            return
        index = torch.tensor(
            list(range(base)) + [base + o for o in offsets], device=self.device, dtype=torch.long
        )
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.length = len(index)
