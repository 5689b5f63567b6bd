"""What every drafter over a trained head shares: the parameters it trains with, and the trained
head's requirement (stage train_drafter trains it on the target's own features)."""

from __future__ import annotations

import importlib
from typing import ClassVar

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
    others only change how it drafts. A kind declares its network (`network`, built and loaded
    here; its module is imported only then, so declarations stay light) and how it trains:
    which loss reads a batch (`training.heads`: "features" predicts the next feature, "multi_token"
    reads K heads over one feature, "adapter" an adapter over the target's shallow states), the
    weights of the (feature, intermediate, distribution) losses, and what the target must give
    (`collection`)."""

    requires = frozenset({TRAINED_HEAD})
    loss: ClassVar[str] = "features"
    loss_weights: ClassVar[tuple[float, float, float]] = (1.0, 0.0, 0.1)

    # "module:Class" of its network (a transformers PreTrainedModel) and the network's config
    # class (EAGLE's by default), and the decoder blocks of its stack (None: `head_layers`)
    network_class: ClassVar[str] = ""
    config_class: ClassVar[str] = "mmspec.decoding.drafters.eagle_net:EagleHeadConfig"
    blocks: ClassVar[int | None] = None

    @classmethod
    def code_modules(cls) -> tuple[str, ...]:
        """The modules of its network and config classes, which it imports by name."""
        named = (cls.network_class, cls.config_class)
        return tuple(dict.fromkeys(path.partition(":")[0] for path in named if path))

    @classmethod
    def network(cls) -> type:
        """The head's network class."""
        return _load(cls.network_class)

    @classmethod
    def network_options(cls, spec: dict) -> dict:
        """What its network's config takes besides the target's sizes."""
        return {}

    @classmethod
    def network_config(cls, target_config, spec: dict, target: str):
        """The config of a new network for a target (`spec`: its training hyperparameters)."""
        from mmspec.decoding.drafters.eagle_net import head_config

        layers = int(spec.get("head_layers", 1)) if cls.blocks is None else cls.blocks
        return head_config(
            target_config,
            layers,
            _load(cls.config_class),
            target=target,
            kind=cls.name,
            training=cls.trained_with(spec),
            **cls.network_options(spec),
        )

    @classmethod
    def new_network(cls, target_config, spec: dict, target: str):
        """A new, randomly initialised network of this kind for a target."""
        return cls.network()(cls.network_config(target_config, spec, target))

    @classmethod
    def random_network(cls, target_config, spec: dict, target: str):
        """A random network whose every part takes part in drafting (`mmspec verify-lossless`
        checks drafting with it exactly, untrained): by default a new one."""
        return cls.new_network(target_config, spec, target)

    @classmethod
    def weights(cls, training: dict, share: float, vocab: int) -> tuple[float, float, float]:
        """The weights of a batch's (feature, intermediate, distribution) losses, each a mean
        over the entries whose loss counts; `share` is their share of the batch's padded
        entries, `vocab` the vocabulary's size (DREAM's release weighs by both): by default
        `loss_weights`."""
        return cls.loss_weights

    @classmethod
    def collection(cls, training: dict) -> dict:
        """What `training.heads.collect_sequence` reads of the target besides its last layer:
        DREAM's intermediate features, Kangaroo's exit layer."""
        return {"intermediate": "none", "exit_layer": 0}

    @classmethod
    def trained_with(cls, spec: dict) -> dict:
        """The training hyperparameters a network's config records."""
        return {k: spec[k] for k in cls.training if k in spec}

    @classmethod
    def training_keys(cls, spec: dict) -> tuple[str, ...]:
        """The keys of `spec` that define its trained head."""
        return tuple(p.key for p in cls.reads(spec) if p.key in cls.training)


def _load(path: str):
    """The object at "module:name" (a network module is imported only when a head is built)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)
