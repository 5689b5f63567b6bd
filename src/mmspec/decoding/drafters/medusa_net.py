"""Medusa's and Hydra's head network: K heads on the target's last feature (Medusa: a ResBlock
each; Hydra: an MLP also reading its ancestors' token embeddings). `drafters.medusa` drafts
with it.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from mmspec.decoding.drafters.eagle_net import EagleHeadConfig


class MultiHeadConfig(EagleHeadConfig):
    """EAGLE's head config (the target's sizes) plus the number of heads and whether each head
    reads its ancestors' tokens (Hydra) or not (Medusa)."""

    model_type = "mmspec_medusa"

    def __init__(self, heads: int = 4, sequential: bool = False, **kw):
        super().__init__(**kw)
        self.heads = heads
        self.sequential = sequential


class ResBlock(nn.Module):
    """x + SiLU(W x) over [n, d_in] -> [n, H]; W starts at zero (Medusa's release), and a
    projection of the extra inputs (Hydra's ancestors) joins the residual."""

    def __init__(self, hidden: int, extra: int = 0):
        super().__init__()
        self.linear = nn.Linear(hidden + extra, hidden)
        nn.init.zeros_(self.linear.weight)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : self.hidden] + nn.functional.silu(self.linear(x))


class MultiHead(PreTrainedModel):
    """K heads; head k (0-based) maps f_t (and, sequential, k ancestor embeddings) to the
    feature whose `lm_head` read-out predicts x_{t+k+2}."""

    config_class = MultiHeadConfig
    base_model_prefix = "head"

    def __init__(self, config: MultiHeadConfig):
        super().__init__(config)
        hidden = config.hidden_size
        self.blocks = nn.ModuleList(
            ResBlock(hidden, k * hidden if config.sequential else 0) for k in range(config.heads)
        )
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, ResBlock):  # a fresh head predicts as the target's lm_head does
            nn.init.zeros_(module.linear.weight)

    def head(self, k: int, features: torch.Tensor, ancestors: torch.Tensor | None = None):
        """Head k over features [..., H] and (sequential) ancestor embeddings [..., k, H]."""
        x = features
        if self.config.sequential and k:
            x = torch.cat([features, ancestors.flatten(-2)], dim=-1)
        return self.blocks[k](x)
