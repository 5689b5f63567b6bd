"""Kangaroo's adapter network over the target's exit-layer states: one attention-only Llama
layer (RMSNorm, self-attention, residual; no feed-forward block) and a final RMSNorm, as its
release builds it (`kangaroo/adapter.py`: `LlamaDecoderLayer` without an MLP, `AdapterModel`).
`drafters.kangaroo` joins it to the target's first layers and drafts with it.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaModel

from mmspec.decoding.drafters.eagle.net import EagleHeadConfig, LlamaLayerHead


class KangarooConfig(EagleHeadConfig):
    model_type = "mmspec_kangaroo"

    def __init__(self, exit_layer: int = 2, **kw):
        super().__init__(**kw)
        self.exit_layer = exit_layer  # the target layers the draft runs before the adapter


class NoFeedForward(nn.Module):
    """In place of a Llama layer's MLP: adds nothing to the residual stream (the lean stack
    skips the block where a layer's MLP has no `gate_proj`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(())


class KangarooAdapter(LlamaLayerHead):
    """One attention-only Llama decoder layer and a norm over the target's exit-layer states:
    norm(x + attn(rmsnorm(x)))."""

    config_class = KangarooConfig

    def __init__(self, config: KangarooConfig):
        super().__init__(config)
        self.model = LlamaModel(config)  # num_hidden_layers 1; its embedding table is unused
        # a Llama layer (the target's class: the draft's stack runs it) without its MLP block
        layer = self.model.layers[0]
        layer.mlp = NoFeedForward()
        layer.post_attention_layernorm = nn.Identity()
        self.post_init()

    def forward(self, shallow: torch.Tensor, attention_mask=None) -> torch.Tensor:
        """The adapter's output [B, n, H] over exit-layer states (training)."""
        return self.model(inputs_embeds=shallow, attention_mask=attention_mask).last_hidden_state
