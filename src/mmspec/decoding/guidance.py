"""Classifier-free guidance (CFG) for image generation: a decoder over two prompt rows.

Row 0 holds the conditional prompt (the caption), row 1 the unconditional one; every generated
token is appended to both, in one batched forward, as LlamaGen, Janus and LANTERN's release do.
The logits the loops see are the guided ones, u + scale * (c - u), restricted to the tokens a
generation may emit (the image codes), so a `GuidedDecoder` stands wherever a one-row `Decoder`
does: as the target (AR and verification) and inside a model drafter. Speculative decoding is
then lossless with respect to the guided distribution, which is the distribution AR samples.
"""

from __future__ import annotations

from mmspec.decoding.decoder import Decoder, Forward
from mmspec.decoding.lazy import torch


class GuidedDecoder:
    """A `Decoder` of (conditional, unconditional) rows presenting the guided logits as one row.

    `allowed`: the half-open id range [start, stop) a generation may emit (the image codes);
    other logits are set to the dtype's minimum, so they get no probability and no argmax.
    """

    rows = 1

    def __init__(
        self,
        decoder: Decoder,
        scale: float,
        allowed: tuple[int, int] | None = None,
        top_k: int = 0,
    ):
        """`top_k` > 0 keeps the k largest guided logits at each position and gives the others
        no probability (LlamaGen's sampling; target and draft alike, so speculative decoding
        stays exact for the truncated distribution AR samples)."""
        self.decoder, self.scale, self.allowed, self.top_k = decoder, scale, allowed, top_k
        self.device = decoder.device
        self.embed = decoder.embed

    @property
    def length(self) -> int:
        return self.decoder.length

    def prefill(self, prompts, score_visual=None, layers: tuple[int, ...] = ()) -> Forward:
        """`prompts`: the (conditional, unconditional) pair."""
        if score_visual is not None:
            raise ValueError("guided image generation has no visual prompt tokens to score")
        if len(prompts) != 2:
            raise ValueError(
                f"guidance needs a (conditional, unconditional) prompt pair, got {len(prompts)}"
            )
        out = self.decoder.prefill(list(prompts), layers=layers)
        return self._guide(out)

    def extend(self, tokens, attention=None, past=None, positions=None, layers=()) -> Forward:
        out = self.decoder.extend(tokens, attention, past, positions, layers)
        return self._guide(out)

    def guide(self, cond: torch.Tensor, uncond: torch.Tensor) -> torch.Tensor:
        """The guided logits of a (conditional, unconditional) pair of logits [..., V]: also what
        a drafter head under guidance presents (it reads out both rows as the target does)."""
        dtype = torch.promote_types(cond.dtype, torch.float32)  # at least float32
        cond, uncond = cond.to(dtype), uncond.to(dtype)
        guided = uncond + self.scale * (cond - uncond)
        if self.allowed is not None:
            start, stop = self.allowed
            low = torch.finfo(guided.dtype).min
            guided[..., :start] = low
            guided[..., stop:] = low
        if 0 < self.top_k < guided.shape[-1]:
            kth = guided.topk(self.top_k, dim=-1).values[..., -1:]
            guided = guided.masked_fill(guided < kth, torch.finfo(guided.dtype).min)
        return guided

    def _guide(self, out: Forward) -> Forward:
        guided = self.guide(out.logits[0], out.logits[1])
        layers = {k: v[:1] for k, v in out.layers.items()}
        return Forward(guided.unsqueeze(0), out.hidden[:1], layers, unconditional=out.hidden[1:])

    def truncate(self, length: int) -> None:
        self.decoder.truncate(length)

    def keep(self, base: int, offsets: list[int]) -> None:
        self.decoder.keep(base, offsets)
