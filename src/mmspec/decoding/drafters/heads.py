"""Trained drafter heads: which class drafts for each kind, and loading a trained head.

A head is saved with `save_pretrained` (stage train_drafter); its config names the target it
was trained on, and loading it for another target is an error naming both.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mmspec.decoding.drafters.eagle import EagleDrafter, EagleHead


def make_head_drafter(kind: str, head, target, temperature: float):
    """The drafter of a head `kind` over the target's `Decoder`."""
    if kind == "eagle":
        return EagleDrafter(head, target, temperature)
    raise ValueError(f"unknown drafter head kind {kind!r}")


def load_head(path: str | Path, target_ref: str, device, dtype: torch.dtype) -> EagleHead:
    """A trained head from `path`, checked against the target it drafts for."""
    config_file = Path(path) / "config.json"
    if not config_file.exists():
        raise ValueError(f"{path}: no trained drafter head here (config.json is missing)")
    head = EagleHead.from_pretrained(path, dtype=dtype).to(device).eval()
    trained_for = head.config.target
    if trained_for != target_ref:
        raise ValueError(
            f"{path}: this {head.config.kind} head was trained for target {trained_for!r}, "
            f"not for {target_ref!r}; train one for this target (stage train_drafter)"
        )
    return head
