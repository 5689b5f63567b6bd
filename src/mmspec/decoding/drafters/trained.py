"""What every drafter over a trained head shares: the parameters it trains with, the trained
head's requirement (stage train_drafter trains it on the target's own features), and how a kind
names its network and its loss."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import ClassVar

from mmspec.decoding.component import NUMBER, TRAINED_HEAD, Param, Values, values
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
# How much noise a head's input features get in training (EAGLE's release: uniform, width 0.2)
HEAD_NOISE = Param(
    "head_noise",
    NUMBER,
    0.2,
    "width of the uniform noise on input features",
    low=0,
    meaning="is a noise width",
)
# The decoder blocks of a head whose kind does not fix them (`HeadDrafter.blocks`: EAGLE's)
HEAD_LAYERS = Param("head_layers", int, 1, "decoder layers", low=1)


class HeadDrafter(Drafter):
    """A drafter over a head trained on the target's features (stage train_drafter). The params
    named in `training` key the trained head's folder (a changed one retrains that head); the
    others only change how it drafts. A kind declares its network (`network_class`, built and
    loaded here) and its loss (`loss_class`: a `head_loss.HeadLoss`, what the head collects of
    the target and how it is scored); their modules are imported only when a head is built or
    trained, so declarations stay light."""

    requires = frozenset({TRAINED_HEAD})

    network_class: ClassVar[str] = ""  # "module:Class" of its network (a PreTrainedModel)
    # "module:Class" of its network's config (EAGLE's by default)
    config_class: ClassVar[str] = "mmspec.decoding.drafters.eagle.net:EagleHeadConfig"
    blocks: ClassVar[int | None] = None  # decoder blocks of its stack (None: `head_layers`)
    loss_class: ClassVar[str] = ""  # "module:Class" of its `HeadLoss`

    @classmethod
    def code_modules(cls) -> tuple[str, ...]:
        """The modules of its network, config and loss classes, which it imports by name."""
        named = (cls.network_class, cls.config_class, cls.loss_class)
        return tuple(dict.fromkeys(path.partition(":")[0] for path in named if path))

    @classmethod
    def network(cls) -> type:
        """The head's network class."""
        return _load(cls.network_class)

    @classmethod
    def loss(cls, training: dict):
        """Its `HeadLoss` for a head trained with `training` (its training hyperparameters)."""
        return _load(cls.loss_class)(training)

    @classmethod
    def network_options(cls, spec: Values) -> dict:
        """What its network's config takes besides the target's sizes."""
        return {}

    @classmethod
    def network_config(cls, target_config, spec: Mapping, target: str):
        """The config of a new network for a target (`spec`: its training hyperparameters)."""
        from mmspec.decoding.drafters.eagle.net import head_config

        spec = values(spec)
        layers = int(spec.of(HEAD_LAYERS)) if cls.blocks is None else cls.blocks
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
    def new_network(cls, target_config, spec: Mapping, target: str):
        """A new, randomly initialised network of this kind for a target."""
        return cls.network()(cls.network_config(target_config, spec, target))

    @classmethod
    def random_network(cls, target_config, spec: Mapping, target: str):
        """A random network whose every part takes part in drafting (`mmspec verify-lossless`
        checks drafting with it exactly, untrained): by default a new one."""
        return cls.new_network(target_config, spec, target)

    @classmethod
    def trained_with(cls, spec: Mapping) -> dict:
        """The training hyperparameters a network's config records."""
        return {key: spec[key] for key in cls.training if key in spec}


def _load(path: str):
    """The object at "module:name" (a head's network or loss module, imported only when used)."""
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)
