"""Lossless check: a method's greedy output against AR's, token for token, and what a
difference is.

A greedy cell of a lossless rule is compared with its AR cell token for token (`lossless_rate`).
Where they differ, the generate job has checked the method's output against the target itself on
the same device: the target reads the output one token at a time, as AR decodes, and at every
position where AR's argmax is not the method's token it records AR's margin between the two, in
units in the last place (ulp) of the model's dtype (`margin_ulps`). A verification forward
over k tokens rounds differently from AR's one-token forward, which flips the argmax only where
AR's two best logits tie within that rounding: a margin of at most TIE_ULPS (of the dtype) is
such a near-tie, a larger one is a real divergence (a bug). No position at all
means the method agrees with AR on this device: the AR cell's tokens differ by its device.
"""

from __future__ import annotations

import math

# The largest margin (in ulp of the dtype, at AR's best logit) at which a divergence counts as a
# rounding near-tie, per dtype. A verification forward over several tokens and AR's one-token
# forward give logits that differ by at most 2 ulp in bf16 and fp16 (tests/test_dtypes.py), and
# in float32, where the sums' own rounding spans more of the last places, by up to 6 ulp on the
# tour's toy target and 35 on its guided image logits (3 x cond - 2 x uncond adds the two rows'
# errors), measured on a CPU on 2026-11-28. A real bug moves a logit by far more (a wrong token
# drafted in is 1e4-1e6 ulp in float32). `mmspec gpu-check --tie-ulps` sets the bf16/fp16 one for
# its dtype rows.
TIE_ULPS = {"bfloat16": 4.0, "float16": 4.0, "float32": 64.0}

DEVICE = "device"  # differs from the AR cell, not from AR on the job's own device
NEAR_TIE = "near_tie"  # every divergence within TIE_ULPS
REAL = "real"  # some divergence beyond it


def first_divergence(output: list[int], reference: list[int]) -> int | None:
    """Index of the first differing token (a length mismatch counts); None when identical."""
    for i, (a, b) in enumerate(zip(output, reference, strict=False)):
        if a != b:
            return i
    if len(output) != len(reference):
        return min(len(output), len(reference))
    return None


def ulp(value: float, dtype) -> float:
    """The spacing of `dtype`'s numbers at |value| (a torch floating dtype)."""
    import torch

    magnitude = max(abs(value), torch.finfo(dtype).tiny)
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(magnitude))


def margin_ulps(logits, ours: int, dtype) -> float:
    """How far the token `ours` is below the argmax of `logits` [V] (the logits AR picks its
    token from): their gap in ulp of `dtype` at the best logit; 0 when `ours` is the argmax."""
    row = logits.float()
    best = float(row.max())
    return (best - float(row[ours])) / ulp(best, dtype)


def tie_ulps(dtype) -> float:
    """The near-tie margin of a torch dtype (or its name), in its ulp: TIE_ULPS."""
    name = str(dtype).removeprefix("torch.")
    if name not in TIE_ULPS:
        raise ValueError(f"no near-tie margin for dtype {name!r}; known: {sorted(TIE_ULPS)}")
    return TIE_ULPS[name]


def kind(ulps: list[float] | None, tie_ulps: float) -> str | None:
    """What a checked difference from the AR cell is, from the margins at the positions where
    the target's own argmax is not the method's token: `DEVICE` (none), `NEAR_TIE` (all within
    `tie_ulps`), `REAL` (any beyond); None when nothing was checked."""
    if ulps is None:
        return None
    if not ulps:
        return DEVICE
    return REAL if max(ulps) > tie_ulps else NEAR_TIE
