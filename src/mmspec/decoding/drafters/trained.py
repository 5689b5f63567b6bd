"""What every drafter over a trained head shares: the parameters it trains with, and the trained
head's requirement (stage train_drafter trains it on the target's own features)."""

from __future__ import annotations

from mmspec.decoding.component import NUMBER, TRAINED_HEAD, Param
from mmspec.decoding.drafters import Drafter

# How every head trains (stage train_drafter), so that a changed value retrains that head only.
# Defaults from EAGLE's release (`train/main.py`, its train_config: lr 3e-5, batch 4, AdamW betas
# (0.9, 0.95), gradient clip 0.5, uniform feature noise of width 0.2); `head_data` names the
# dataset (a training split) whose prompts the target answers, and has no default; `head_steps`
# counts optimiser steps (the release counts 20 epochs of ShareGPT instead).
HEAD_TRAINING = (
    Param("head_data", str, None, "the dataset (a training split) it trains on", optional=True),
    Param("head_steps", int, 2000, "optimiser steps", low=1),
    Param("head_lr", NUMBER, 3e-5, "learning rate", low=0, low_open=True),
    Param("head_batch_size", int, 4, "sequences per step", low=1),
)
HEAD_NOISE = Param(
    "head_noise",
    NUMBER,
    0.2,
    "width of the uniform noise on input features",
    low=0,
    meaning="is a noise width",
)


class HeadDrafter(Drafter):
    """A drafter over a head trained on the target's features (stage train_drafter). The params
    named in `training` key the trained head's folder (a changed one retrains that head); the
    others only change how it drafts."""

    requires = frozenset({TRAINED_HEAD})

    @classmethod
    def training_keys(cls, spec: dict) -> tuple[str, ...]:
        """The keys of `spec` that define its trained head."""
        return tuple(p.key for p in cls.reads(spec) if p.key in cls.training)
