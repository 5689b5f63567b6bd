"""DREAM's head network, as its release builds it (`model/cnets.py`, class `Model`, l. 650-825):
no input projection; a decoder block over the token embeddings alone (l. 768: `hidden_states =
inputs_embeds`, the fc over [embedding, feature] commented out at l. 668 and 769), a gated
cross-attention block whose keys and values are the target's raw features (`LlamaCrossAttention`,
l. 472-592; `LlamaCrossAttentionDecoderLayer`, l. 594-648), a second decoder block and a final
norm. The target's features enter only through the cross-attention. `drafters.dream.DreamDrafter`
drafts with it; its stream after the cross-attention block (the release's
`all_hidden_states[-2]`, `train/main_deepspeed.py` l. 303) is what the intermediate-feature loss
supervises.
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

from mmspec.decoding.drafters.eagle.net import EagleHeadConfig, LlamaLayerHead
from mmspec.decoding.lean_stack import rms_norm


class DreamHeadConfig(EagleHeadConfig):
    """EAGLE's head config plus DREAM's switch (ablation)."""

    model_type = "mmspec_dream"

    def __init__(self, cross: bool = True, **kw):
        super().__init__(**kw)
        self.cross = cross  # False: DREAM without its cross-attention block


class CrossAttention(nn.Module):
    """The release's `LlamaCrossAttentionDecoderLayer`: queries from the normed stream, keys and
    values from the raw target features (no norm before the projections, cnets.py l. 548-549),
    RMSNorm on each head's queries and keys (l. 495-496, 545, 555), no rotary embedding; the
    attention and MLP outputs enter the stream through tanh gates initialised at 0 (l. 603,
    607, 633, 638). Keys and values have the target's key-value heads (`num_key_value_heads`,
    l. 490-491), each shared by its group of query heads (`repeat_kv`, l. 552-553): a GQA target
    gets the release's smaller projection."""

    def __init__(self, config):
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.heads, self.dim = heads, hidden // heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.kv = nn.Linear(hidden, 2 * self.kv_heads * self.dim, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.q_norm = LlamaRMSNorm(self.dim, eps=config.rms_norm_eps)
        self.k_norm = LlamaRMSNorm(self.dim, eps=config.rms_norm_eps)
        self.mlp_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp_gate = nn.Parameter(torch.zeros(1))

    def project(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [..., heads, M, dim] of memory features [..., M, H] (each key-value
        head repeated for its group of query heads)."""
        k, v = F.linear(features, self.kv.weight).chunk(2, dim=-1)
        shape = (*features.shape[:-1], self.kv_heads, self.dim)
        k = rms_norm(k.reshape(shape), self.k_norm).transpose(-3, -2)
        v = v.reshape(shape).transpose(-3, -2)
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
        return k, v

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
    """First decoder block -> cross-attention block -> final decoder block -> norm, with the
    interface of a Llama stack (so `Decoder` runs it with its KV cache and masks). The first
    block has no input norm (the release's `LlamaDecoderLayer` with index 0, cnets.py l. 399,
    429): it reads the raw token embeddings.

    The memory of a drafting forward is set by the caller before it (`memory`: the verified
    features' keys, values and target positions; `drafted`: keys and values of drafted nodes'
    memory entries, with `drafted_visible` [n, D] saying which of them each new entry sees)."""

    def __init__(self, config: DreamHeadConfig):
        super().__init__()
        self.config = config
        self.first = LlamaDecoderLayer(config, 0)
        self.first.input_layernorm = nn.Identity()
        self.cross = CrossAttention(config) if config.cross else None
        self.final = LlamaDecoderLayer(config, 1)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.memory = None  # (keys, values [heads, M, dim], positions [M])
        self.drafted = None  # (keys, values [heads, D, dim]) or None
        self.drafted_visible = None  # [n, D] bool
        self.intermediate = None  # the last forward's stream after the cross block

    @property
    def layers(self) -> list:
        """The decoder blocks in order (what a Llama stack's `layers` are to its cache)."""
        return [self.first, self.final]

    def lean_between(self) -> dict:
        """The cross-attention block, run by the lean forward before the final block."""
        return {1: self._fuse} if self.cross is not None else {}

    def _fuse(self, hidden, position_ids, memory=None):
        """The cross-attention block. Entry j (the embedding of the token at j + 1) sees the
        target's features at positions <= j (the release's token i sees features 0 .. i - 1:
        its `make_causal_mask_for_cross_attention`, cnets.py l. 498-529, over features one
        shorter than the embeddings, `train/main_deepspeed.py` l. 156, 187) and, drafting, the
        drafted memory entries `drafted_visible` grants it."""
        rows = hidden.shape[0]
        if memory is not None:  # training: (keys, values [B, ...], positions [B, M])
            keys, values, positions = memory
            visible = positions.unsqueeze(-2) <= position_ids.unsqueeze(-1)
        else:
            keys, values, positions = self.memory
            visible = positions.view(1, 1, -1) <= position_ids.unsqueeze(-1)
            if self.drafted is not None:
                keys = torch.cat([keys, self.drafted[0]], -2)
                values = torch.cat([values, self.drafted[1]], -2)
                extra = self.drafted_visible.to(visible.device).unsqueeze(0)
                visible = torch.cat([visible, extra.expand(visible.shape[0], -1, -1)], -1)
            keys = keys.unsqueeze(0).expand(rows, *keys.shape)
            values = values.unsqueeze(0).expand(rows, *values.shape)
        hidden = self.cross(hidden, keys, values, visible.expand(rows, -1, -1))
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


class DreamHead(LlamaLayerHead):
    """The `DreamStack` over token embeddings, the target's features its cross-attention memory
    (its own embedding table is unused: inputs arrive as vectors)."""

    config_class = DreamHeadConfig

    def __init__(self, config: DreamHeadConfig):
        super().__init__(config)
        self.model = DreamStack(config)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, CrossAttention):  # the gates start closed (cnets.py l. 603, 607)
            module.attn_gate.data.zero_()
            module.mlp_gate.data.zero_()

    def inputs(self, embeds: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """An entry is its token's embedding alone (EAGLE's entry interface: `features` reach
        the head through the memory, never the stream)."""
        return embeds

    def forward(self, embeds, features, attention_mask=None):
        """(predicted next features, intermediate stream) [B, n, H], training: entry j is the
        embedding of token j + 1, and its memory the sequence's features at positions <= j."""
        positions = torch.arange(features.shape[1], device=features.device)
        memory = None
        if self.model.cross is not None:
            keys, values = self.model.cross.project(features.to(embeds.dtype))
            memory = (keys, values, positions.unsqueeze(0).expand(features.shape[0], -1))
            if attention_mask is not None:  # padding never enters the memory
                pad = attention_mask == 0
                memory = (keys, values, memory[2].masked_fill(pad, torch.iinfo(torch.long).max))
        out = self.model(
            inputs_embeds=embeds,
            attention_mask=attention_mask,
            position_ids=positions.unsqueeze(0).expand(features.shape[0], -1),
            memory=memory,
        )
        return out.last_hidden_state, self.model.intermediate
