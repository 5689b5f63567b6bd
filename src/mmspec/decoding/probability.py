"""Next-token distributions from logits, and picking a token from them."""

from __future__ import annotations

from mmspec.decoding.lazy import torch


def distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax at `temperature` (> 0), in float32 at least (float64 logits stay float64, which
    exact enumeration needs)."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    logits = logits.to(dtype)
    if temperature != 1.0:  # x / 1.0 is x: one kernel fewer per draft step of greedy drafting
        logits = logits / temperature
    return torch.softmax(logits, dim=-1)


def pick(logits: torch.Tensor, temperature: float, sampler) -> int:
    """Argmax at temperature 0, else one draw at `temperature`."""
    if temperature == 0:
        return int(logits.argmax())
    return sampler.categorical(distribution(logits, temperature))
