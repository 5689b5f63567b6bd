"""EAGLE's head network: fc(2H -> H) over [token embedding, target feature], then a Llama
decoder stack (EAGLE, Li et al. 2024, Section 3; release `model/cnets.py`). It is saved with
`save_pretrained` by stage train_drafter (its config names the target it was trained for) and
drafts through `drafters.eagle.EagleDrafter`.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaModel, PreTrainedModel


class EagleHeadConfig(LlamaConfig):
    """A Llama config for the head's decoder layer(s), plus what the head was trained for."""

    model_type = "mmspec_eagle"

    def __init__(self, target: str = "", kind: str = "eagle", training: dict | None = None, **kw):
        super().__init__(**kw)
        self.target = target  # the reference of the target whose features it was trained on
        self.kind = kind
        self.training = training or {}


class LlamaLayerHead(PreTrainedModel):
    """A trained head built of Llama decoder layers (EAGLE's, DREAM's, Kangaroo's adapter)."""

    base_model_prefix = "head"
    _supports_sdpa = True  # its layers attend with SDPA, as the target's do
    _no_split_modules = ["LlamaDecoderLayer"]


class EagleHead(LlamaLayerHead):
    """fc(2H -> H) over [token embedding, target feature], then a Llama stack (its own
    embedding table is unused: inputs arrive as vectors)."""

    config_class = EagleHeadConfig

    def __init__(self, config: EagleHeadConfig):
        super().__init__(config)
        hidden = config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.model = self.build_stack(config)
        self.post_init()

    @staticmethod
    def build_stack(config) -> nn.Module:
        """The stack after `fc` (DREAM's head builds its own)."""
        return LlamaModel(config)

    def inputs(self, embeds: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Entry vectors [..., H] from next-token embeddings and target features [..., H]."""
        return self.fc(torch.cat([embeds, features.to(embeds.dtype)], dim=-1))

    def forward(self, embeds, features, attention_mask=None):
        """Predicted next features [B, n, H] (training; decoding runs through `Decoder`)."""
        out = self.model(inputs_embeds=self.inputs(embeds, features), attention_mask=attention_mask)
        return out.last_hidden_state


def head_config(target_config, layers: int = 1, config_class=None, **extra) -> EagleHeadConfig:
    """A head config (`config_class`, default EAGLE's) matching the target's language model
    (hidden size, heads, rope)."""
    text = getattr(target_config, "text_config", None) or target_config
    return (config_class or EagleHeadConfig)(
        vocab_size=1,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=getattr(text, "num_key_value_heads", text.num_attention_heads),
        head_dim=getattr(text, "head_dim", None),
        max_position_embeddings=max(4096, getattr(text, "max_position_embeddings", 0) or 0),
        rms_norm_eps=getattr(text, "rms_norm_eps", 1e-6),
        rope_parameters=getattr(text, "rope_parameters", None),
        hidden_act="silu",
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,
        **extra,
    )
