"""A self-speculative drafter: the target's own first layers, then its final norm and lm_head.

No trained part: the draft is the target cut after `exit_layers` decoder layers, sharing their
weights (LayerSkip's and Draft & Verify's self-speculation without their training). It drafts
from the target's own prompt, as mmspec's trained-head drafters do.
"""

from __future__ import annotations

import copy

from torch import nn

from mmspec.api import Decoder, DecoderDrafter, Param, Values


def first_layers(stack: nn.Module, n: int) -> nn.Module:
    """A copy of a decoder stack that runs only its first `n` layers (the layers shared)."""
    if not 0 < n < len(stack.layers):
        raise ValueError(f"exit_layers must be in [1, {len(stack.layers) - 1}], got {n}")
    cut = copy.copy(stack)
    cut._modules = dict(stack._modules)
    cut.layers = nn.ModuleList(stack.layers[:n])
    cut.config = copy.copy(stack.config)
    cut.config.num_hidden_layers = n
    if getattr(cut.config, "layer_types", None):
        cut.config.layer_types = cut.config.layer_types[:n]
    return cut


EXIT_LAYERS = Param("exit_layers", int, 1, "target layers the draft runs", low=1)


class EarlyExitDrafter(DecoderDrafter):
    """The target's first `exit_layers` layers as its draft model (drafting as mmspec's draft
    models do, over the one prompt it is given: the target's own)."""

    name = "early_exit"
    params = (EXIT_LAYERS,)
    requires = frozenset()  # nothing but the target
    description = "the target's own first layers (self-speculative early exit)"
    source = "LayerSkip (Elhoushi et al. 2024), without its training"

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        """`spec`: its own values (`exit_layers`); `target`: the target's `Decoder`."""
        stack = first_layers(target.stack, int(spec.of(EXIT_LAYERS)))
        decoder = Decoder(target.model, parts=(stack, target.lm_head, target.embed))
        return cls(decoder, temperature)
