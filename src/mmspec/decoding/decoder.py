"""A causal LM with its own KV cache: the one object the decoding loops talk to.

It wraps the language-model part of any HF model (Llava's `model.model.language_model`, a plain
causal LM's `model.model`) and its `lm_head`. The vision tower is never called here: images
enter as precomputed embeddings spliced into the prompt (see `views`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from mmspec.decoding.kv_cache import new_cache


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
    """One model's incremental decoding state over B rows: a DynamicCache and its length.

    Rows are prompts of possibly different lengths (the views of a batched ensemble), left-padded
    to a common length at prefill; every later token is appended to all rows at once, so the rows
    stay aligned and `keep`/`truncate` act on all of them alike.
    """

    def __init__(self, model):
        self.model = model
        self.stack, self.lm_head, self.embed = language_parts(model)
        self.device = next(model.parameters()).device
        self.cache: DynamicCache | None = None
        self.length = 0  # cached positions per row, padding included
        self.pad = torch.zeros(1, dtype=torch.long)  # left padding of each row

    @property
    def rows(self) -> int:
        return len(self.pad)

    @torch.inference_mode()
    def prefill(self, prompts: torch.Tensor | list[torch.Tensor]) -> Forward:
        """Start a fresh cache from prompt embeddings ([L, H], or one [L_b, H] per row).

        Returns the last position of each row: logits [B, V], hidden [B, H].
        """
        prompts = [prompts] if isinstance(prompts, torch.Tensor) else list(prompts)
        lengths = [p.shape[0] for p in prompts]
        width = max(lengths)
        self.pad = torch.tensor([width - n for n in lengths], dtype=torch.long, device=self.device)
        embeds = prompts[0].new_zeros(len(prompts), width, prompts[0].shape[-1])
        for b, prompt in enumerate(prompts):
            embeds[b, width - lengths[b] :] = prompt
        self.cache = new_cache(self.stack.config)
        self.length = 0
        out = self._run(embeds)
        return Forward(out.logits[:, -1], out.hidden[:, -1])

    @torch.inference_mode()
    def extend(
        self,
        tokens: list[int] | torch.Tensor,
        attention: torch.Tensor | None = None,
        past: torch.Tensor | None = None,
        positions: list[int] | None = None,
    ):
        """Append the same tokens to every row; returns logits [B, n, V] and hidden [B, n, H].

        `attention` ([n, n] bool, True = may attend) restricts how the new tokens see each other
        (token trees; each node then sits at position base + its depth). `past` ([n, k] bool)
        restricts what they see of the last k cached positions (tree nodes drafted earlier in the
        same proposal); the rest of the cache is always visible. `positions` overrides the new
        tokens' positions (unpadded).
        """
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device).view(1, -1)
        embeds = self.embed(ids).expand(self.rows, -1, -1)
        return self._run(embeds, attention, past, positions)

    def _run(self, embeds, attention=None, past=None, positions=None) -> Forward:
        rows, n = embeds.shape[:2]
        if positions is not None:
            steps = torch.as_tensor(positions, device=self.device) - self.length
        elif attention is not None:
            steps = attention.to(self.device).sum(-1) - 1  # a tree node's depth below the root
        else:
            steps = torch.arange(n, device=self.device)
        positions = (self.length + steps).unsqueeze(0) - self.pad.unsqueeze(1)
        padded = bool(self.pad.any())
        mask = None
        if attention is not None or past is not None or padded:
            mask = self._mask(rows, n, attention, past, embeds.dtype)
        out = self.stack(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=positions.clamp_min(0),
            past_key_values=self.cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state
        self.length += n
        return Forward(self.lm_head(hidden), hidden)

    def _mask(self, rows: int, n: int, attention, past, dtype) -> torch.Tensor:
        """A 4D additive mask [B, 1, n, cache + n]: padding hidden, new tokens causal or tree."""
        total = self.length + n
        new = attention if attention is not None else torch.ones(n, n, device=self.device).tril()
        allowed = torch.ones(rows, n, total, dtype=torch.bool, device=self.device)
        allowed[:, :, self.length :] = new.to(self.device).bool()
        if past is not None:
            allowed[:, :, self.length - past.shape[1] : self.length] = past.to(self.device).bool()
        keys = torch.arange(total, device=self.device)
        allowed &= keys.view(1, 1, -1) >= self.pad.view(-1, 1, 1)
        # a padding position attends to itself only, so no query row is fully masked
        diagonal = torch.arange(n, device=self.device)
        allowed[:, diagonal, self.length + diagonal] = True
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask.unsqueeze(1)

    def truncate(self, length: int) -> None:
        """Drop cached positions beyond `length` (rejected draft tokens)."""
        if length < self.length:
            # DynamicCache.crop takes a negative count to remove in transformers 5.
            self.cache.crop(length - self.length)
            self.length = length

    @torch.inference_mode()
    def keep(self, base: int, offsets: list[int]) -> None:
        """Keep cached positions [0, base) plus base + offsets (a tree path), compacted in order."""
        if offsets == list(range(len(offsets))):
            self.truncate(base + len(offsets))
            return
        index = torch.tensor(
            list(range(base)) + [base + o for o in offsets], device=self.device, dtype=torch.long
        )
        for layer in self.cache.layers:
            if hasattr(layer, "compact"):
                layer.compact(index)
            else:
                layer.keys = layer.keys.index_select(-2, index)
                layer.values = layer.values.index_select(-2, index)
        self.length = len(index)
