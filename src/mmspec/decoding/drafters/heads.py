"""Trained drafter heads: a kind's drafter component, building a head, loading a trained one.

A head is saved with `save_pretrained` (stage train_drafter); its config names the target it
was trained on, and loading it for another target is an error naming both.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmspec.decoding import catalog
from mmspec.decoding.lazy import torch


def head_kind(kind: str):
    """The drafter component of a trained head's kind (it names the head's network and loss)."""
    drafter = catalog.get("drafter", kind)
    if not hasattr(drafter, "new_network"):
        raise ValueError(f"drafter {kind!r} drafts with no trained head")
    return drafter


def build_head(kind: str, target_config, spec: dict, target: str):
    """A new (randomly initialised) head of `kind` for a target, as `spec` (a method spec's
    hyperparameters) sets it."""
    return head_kind(kind).new_network(target_config, spec, target)


def load_head(path: str | Path, target_ref: str, device, dtype: torch.dtype, kind: str):
    """The trained head of `kind` at `path`, checked against the target it drafts for."""
    config_file = Path(path) / "config.json"
    if not config_file.exists():
        raise ValueError(f"{path}: no trained drafter head here (config.json is missing)")
    saved = json.loads(config_file.read_text())
    if saved.get("kind") != kind:
        raise ValueError(f"{path}: a {saved.get('kind')!r} head, not a {kind!r} one")
    head = head_kind(kind).network().from_pretrained(path, dtype=dtype).to(device).eval()
    trained_for = head.config.target
    if trained_for != target_ref:
        raise ValueError(
            f"{path}: this {kind} head was trained for target {trained_for!r}, "
            f"not for {target_ref!r}; train one for this target (stage train_drafter)"
        )
    return head
