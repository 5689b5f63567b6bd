"""DREAM's head network (DREAM, Section 3.1; release `model/cnets.py` as the notes describe it):
an initial decoder block over EAGLE's entry stream, a gated cross-attention block over the
target's cached features, a final decoder block and a norm. `drafters.dream.DreamDrafter`
drafts with it; its intermediate output is what the intermediate-feature loss supervises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.models.llama.modeling_llama import (
    LlamaDecoderLayer,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

from mmspec.decoding.drafters.eagle_net import EagleHead, EagleHeadConfig
from mmspec.decoding.lean_stack import rms_norm


class DreamHeadConfig(EagleHeadConfig):
    """EAGLE's head config plus DREAM's switches (ablations)."""

    model_type = "mmspec_dream"

    def __init__(self, cross: bool = True, **kw):
        super().__init__(**kw)
        self.cross = cross  # False: DREAM without its cross-attention block


class CrossAttention(nn.Module):
    """Gated cross-attention of the entry stream (queries) over the target's features."""

    def __init__(self, config):
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.heads, self.dim = heads, hidden // heads
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.memory_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.kv = nn.Linear(hidden, 2 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.q_norm = LlamaRMSNorm(self.dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.dim, eps=config.rms_norm_eps)
        self.mlp_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp_gate = nn.Parameter(torch.zeros(1))

    def project(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [..., heads, M, dim] of memory features [..., M, H]."""
        k, v = self.kv(rms_norm(features, self.memory_norm)).chunk(2, dim=-1)
        shape = (*features.shape[:-1], self.heads, self.dim)
        k = rms_norm(k.reshape(shape), self.k_norm).transpose(-3, -2)
        return k, v.reshape(shape).transpose(-3, -2)

    def forward(self, hidden, keys, values, visible) -> torch.Tensor:
        """hidden [B, n, H]; keys, values [B, heads, M, dim]; visible [B, n, M] bool.

        The norms run as functions (the lean forward's arithmetic): a draft forward is a few
        small kernels, whose module-call overhead would otherwise dominate on a CPU."""
        b, n, _ = hidden.shape
        q = F.linear(rms_norm(hidden, self.norm), self.q.weight).view(b, n, self.heads, self.dim)
        q = rms_norm(q, self.q_norm).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible.unsqueeze(1))
        out = F.linear(out.transpose(1, 2).reshape(b, n, -1), self.o.weight)
        hidden = hidden + torch.tanh(self.attn_gate) * out
        x = rms_norm(hidden, self.mlp_norm)
        mlp = self.mlp
        gated = F.silu(F.linear(x, mlp.gate_proj.weight)) * F.linear(x, mlp.up_proj.weight)
        return hidden + torch.tanh(self.mlp_gate) * F.linear(gated, mlp.down_proj.weight)


class DreamStack(nn.Module):
    """Initial decoder block -> cross-attention block -> final decoder block -> norm, with the
    interface of a Llama stack (so `Decoder` runs it with its KV cache and masks). The memory
    (keys, values and the target positions they hold) is set by the caller before a forward."""

    def __init__(self, config: DreamHeadConfig):
        super().__init__()
        self.config = config
        self.first = LlamaDecoderLayer(config, 0)
        self.cross = CrossAttention(config) if config.cross else None
        self.final = LlamaDecoderLayer(config, 1)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.memory = None  # (keys, values [heads, M, dim], positions [M])
        self.intermediate = None  # the last forward's stream after the cross block

    @property
    def layers(self) -> list:
        """The decoder blocks in order (what a Llama stack's `layers` are to its cache)."""
        return [self.first, self.final]

    def lean_between(self) -> dict:
        """The cross-attention block, run by the lean forward before the final block."""
        return {1: self._fuse} if self.cross is not None else {}

    def _fuse(self, hidden, position_ids, memory=None):
        """The cross-attention block over the memory; entry j reads the target's features of
        positions <= j (its own feature included)."""
        keys, values, positions = memory if memory is not None else self._memory(hidden)
        visible = positions.unsqueeze(-2) <= position_ids.unsqueeze(-1)
        hidden = self.cross(hidden, keys, values, visible.expand(hidden.shape[0], -1, -1))
        self.intermediate = hidden
        return hidden

    def forward(
        self,
        inputs_embeds,
        attention_mask=None,
        position_ids=None,
        past_key_values=None,
        use_cache=False,
        output_hidden_states=False,
        memory=None,
    ):
        """`memory` (training): (keys, values [B, heads, M, dim], positions [B, M]); default
        the memory set on the stack (decoding, one sequence)."""
        if position_ids is None:
            past = past_key_values.get_seq_length() if past_key_values is not None else 0
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
            position_ids = (position_ids + past).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            position_ids=position_ids,
        )
        rotary = self.rotary_emb(inputs_embeds, position_ids=position_ids)
        layer = dict(
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            position_embeddings=rotary,
        )
        hidden = self.first(inputs_embeds, **layer)
        self.intermediate = hidden
        if self.cross is not None:
            hidden = self._fuse(hidden, position_ids, memory)
        hidden = self.final(hidden, **layer)
        return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden))

    def _memory(self, hidden):
        keys, values, positions = self.memory
        rows = hidden.shape[0]
        expand = lambda t: t.unsqueeze(0).expand(rows, *t.shape)  # noqa: E731
        return expand(keys), expand(values), positions.unsqueeze(0)


class DreamHead(EagleHead):
    """EAGLE's fc(2H -> H) over [token embedding, target feature], then the `DreamStack`."""

    config_class = DreamHeadConfig

    @staticmethod
    def build_stack(config) -> nn.Module:
        return DreamStack(config)

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, CrossAttention):  # the gates start closed (DREAM's release)
            module.attn_gate.data.zero_()
            module.mlp_gate.data.zero_()

    def forward(self, embeds, features, attention_mask=None):
        """(predicted next features, intermediate stream) [B, n, H], training: the memory is
        the sequence's own features, entry j reading positions <= j."""
        positions = torch.arange(features.shape[1], device=features.device)
        memory = None
        if self.model.cross is not None:
            keys, values = self.model.cross.project(features.to(embeds.dtype))
            memory = (keys, values, positions.unsqueeze(0).expand(features.shape[0], -1))
            if attention_mask is not None:  # padding never enters the memory
                pad = attention_mask == 0
                memory = (keys, values, memory[2].masked_fill(pad, torch.iinfo(torch.long).max))
        out = self.model(
            inputs_embeds=self.inputs(embeds, features),
            attention_mask=attention_mask,
            position_ids=positions.unsqueeze(0).expand(features.shape[0], -1),
            memory=memory,
        )
        return out.last_hidden_state, self.model.intermediate
