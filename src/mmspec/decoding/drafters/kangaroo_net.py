"""Kangaroo's adapter network: one Llama decoder layer and a norm over the target's exit-layer
states. `drafters.kangaroo` joins it to the target's first layers and drafts with it.
"""

from __future__ import annotations

import torch
from transformers import LlamaModel

from mmspec.decoding.drafters.eagle_net import EagleHeadConfig, LlamaLayerHead


class KangarooConfig(EagleHeadConfig):
    model_type = "mmspec_kangaroo"

    def __init__(self, exit_layer: int = 2, **kw):
        super().__init__(**kw)
        self.exit_layer = exit_layer  # the target layers the draft runs before the adapter


class KangarooAdapter(LlamaLayerHead):
    """One Llama decoder layer and a norm over the target's exit-layer states."""

    config_class = KangarooConfig

    def __init__(self, config: KangarooConfig):
        super().__init__(config)
        self.model = LlamaModel(config)  # num_hidden_layers 1; its embedding table is unused
        self.post_init()

    def forward(self, shallow: torch.Tensor, attention_mask=None) -> torch.Tensor:
        """The adapter's output [B, n, H] over exit-layer states (training)."""
        return self.model(inputs_embeds=shallow, attention_mask=attention_mask).last_hidden_state
