"""Kangaroo's drafter: the target's own first layers plus a small adapter (self-speculative).

Kangaroo (Liu et al. 2024; release `kangaroo/kangaroo_model.py`): the draft is the target's
shallow sub-network (its embedding and first `kangaroo_layers` decoder layers, 2 in the release
for 7B models) followed by a trained adapter (here one Llama decoder layer and a norm) and the
target's `lm_head`. Drafting stops early once the draft's top-1 probability falls below
`kangaroo_exit` (0.6) or after gamma (6) tokens (the chain policy's early exit). The adapter is
the only trained part; it is saved alone and joined to the target's layers when loaded, so the
shared layers are the target's own modules (no copy of their weights). Only targets whose
decoder layers are Llama's take the adapter (LLaVA's Vicuna, the toy models).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import LlamaModel, PreTrainedModel

from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.eagle import EagleHeadConfig
from mmspec.decoding.drafters.model import ModelDrafter


class KangarooConfig(EagleHeadConfig):
    model_type = "mmspec_kangaroo"

    def __init__(self, exit_layer: int = 2, **kw):
        super().__init__(**kw)
        self.exit_layer = exit_layer  # the target layers the draft runs before the adapter


class KangarooAdapter(PreTrainedModel):
    """One Llama decoder layer and a norm over the target's exit-layer states."""

    config_class = KangarooConfig
    base_model_prefix = "head"
    _supports_sdpa = True  # its layers attend with SDPA, as the target's do
    _no_split_modules = ["LlamaDecoderLayer"]

    def __init__(self, config: KangarooConfig):
        super().__init__(config)
        self.model = LlamaModel(config)  # num_hidden_layers 1; its embedding table is unused
        self.post_init()

    def forward(self, shallow: torch.Tensor, attention_mask=None) -> torch.Tensor:
        """The adapter's output [B, n, H] over exit-layer states (training)."""
        return self.model(inputs_embeds=shallow, attention_mask=attention_mask).last_hidden_state


def shallow_stack(target_stack, adapter: KangarooAdapter) -> nn.Module:
    """The target's stack cut after its exit layer, with the adapter's layer and norm after it:
    a module of the target's own class (its forward, rotary embedding and embedding table),
    sharing the target's layers."""
    exit_layer = adapter.config.exit_layer
    if exit_layer >= len(target_stack.layers):
        raise ValueError(
            f"kangaroo_layers {exit_layer} must be below the target's {len(target_stack.layers)} "
            "layers"
        )
    layer = adapter.model.layers[0]
    if type(layer) is not type(target_stack.layers[0]):
        raise ValueError(
            f"Kangaroo's adapter is a {type(layer).__name__}, and this target's layers are "
            f"{type(target_stack.layers[0]).__name__}: its adapter is built for Llama stacks"
        )
    layer.self_attn.layer_idx = exit_layer  # its place in the draft's KV cache
    stack = copy.copy(target_stack)
    stack._modules = dict(target_stack._modules)  # a copy's own submodules, the target's kept
    stack.layers = nn.ModuleList([*target_stack.layers[:exit_layer], layer])
    stack.norm = adapter.model.norm
    stack.config = copy.copy(target_stack.config)
    stack.config.num_hidden_layers = exit_layer + 1
    if getattr(stack.config, "layer_types", None):
        stack.config.layer_types = stack.config.layer_types[: exit_layer + 1]
    return stack


class KangarooDrafter(ModelDrafter):
    """A `ModelDrafter` over the shallow stack, reading the target's own prompt."""

    def __init__(self, adapter: KangarooAdapter, target: Decoder, temperature: float):
        stack = shallow_stack(target.stack, adapter)
        decoder = Decoder(target.model, parts=(stack, target.lm_head, target.embed))
        super().__init__(decoder, temperature)
