"""Trained drafter heads: the network of each kind, building, and loading a trained head.

A head is saved with `save_pretrained` (stage train_drafter); its config names the target it
was trained on, and loading it for another target is an error naming both.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mmspec.decoding import catalog
from mmspec.decoding.drafters.dream_net import DreamHead, DreamHeadConfig
from mmspec.decoding.drafters.eagle_net import EagleHead, EagleHeadConfig, head_config
from mmspec.decoding.drafters.kangaroo_net import KangarooAdapter, KangarooConfig
from mmspec.decoding.drafters.medusa_net import MultiHead, MultiHeadConfig

# kind -> (head class, config class, decoder blocks of its stack)
HEADS = {
    "eagle": (EagleHead, EagleHeadConfig, None),  # None: `head_layers`
    "dream": (DreamHead, DreamHeadConfig, 2),  # initial and final blocks around the cross block
    "medusa": (MultiHead, MultiHeadConfig, 0),
    "hydra": (MultiHead, MultiHeadConfig, 0),
    "kangaroo": (KangarooAdapter, KangarooConfig, 1),  # the adapter's one layer
}


def build_head(kind: str, target_config, spec: dict, target: str):
    """A new (randomly initialised) head of `kind` for a target, as `spec` (a method spec's
    hyperparameters) sets it."""
    model, config_class, blocks = HEADS[kind]
    extra = {}
    if kind == "dream":
        extra["cross"] = bool(spec.get("dream_cross", True))
    if kind in ("medusa", "hydra"):
        extra.update(heads=int(spec["medusa_heads"]), sequential=kind == "hydra")
    if kind == "kangaroo":
        extra["exit_layer"] = int(spec["kangaroo_layers"])
    layers = int(spec.get("head_layers", 1)) if blocks is None else blocks
    training = {k: v for k, v in spec.items() if k.startswith(("head_", "dream_"))}
    config = head_config(
        target_config, layers, config_class, target=target, kind=kind, training=training, **extra
    )
    return model(config)


def make_head_drafter(spec: dict, head, target, temperature: float):
    """The drafter of `spec`'s head kind over the target's `Decoder`."""
    drafter = catalog.get("drafter", spec["drafter"])
    return drafter.build(spec, target=target, head=head, temperature=temperature)


def load_head(path: str | Path, target_ref: str, device, dtype: torch.dtype, kind: str):
    """The trained head of `kind` at `path`, checked against the target it drafts for."""
    config_file = Path(path) / "config.json"
    if not config_file.exists():
        raise ValueError(f"{path}: no trained drafter head here (config.json is missing)")
    saved = json.loads(config_file.read_text())
    if saved.get("kind") != kind:
        raise ValueError(f"{path}: a {saved.get('kind')!r} head, not a {kind!r} one")
    head = HEADS[kind][0].from_pretrained(path, dtype=dtype).to(device).eval()
    trained_for = head.config.target
    if trained_for != target_ref:
        raise ValueError(
            f"{path}: this {kind} head was trained for target {trained_for!r}, "
            f"not for {target_ref!r}; train one for this target (stage train_drafter)"
        )
    return head
