"""Medusa's and Hydra's head network: K heads on the target's last feature (Medusa: a ResBlock
each, its release's `ResBlock`; Hydra: a ResBlock over the feature and the embeddings of the
tokens before the one it drafts, its release's grounded `HydraMLP`). `drafters.medusa` drafts
with it.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from mmspec.decoding.drafters.eagle.net import EagleHeadConfig


class MultiHeadConfig(EagleHeadConfig):
    """EAGLE's head config (the target's sizes) plus the number of heads and whether each head
    reads its ancestors' tokens (Hydra) or not (Medusa)."""

    model_type = "mmspec_medusa"

    def __init__(self, heads: int = 4, sequential: bool = False, **kw):
        super().__init__(**kw)
        self.heads = heads
        self.sequential = sequential


class ResBlock(nn.Module):
    """R x + SiLU(W x) over x [n, d_in] -> [n, H], W initialised at zero. Medusa (no extra
    inputs): R is the identity (release `medusa/model/medusa_model.py`, `ResBlock`). Hydra
    (extra inputs: token embeddings): R is a learned linear map of the whole input, PyTorch's
    default initialisation (release `hydra/model/hydra_heads/mlp_head.py`, `ResBlock` with
    `num_condition` > 0: `res_connection`)."""

    def __init__(self, hidden: int, extra: int = 0):
        super().__init__()
        self.linear = nn.Linear(hidden + extra, hidden)
        self.residual = nn.Linear(hidden + extra, hidden) if extra else None
        # how `MultiHead._init_weights` initialises them (marked on the linear maps themselves:
        # transformers skips the init of a custom module without parameters of its own)
        self.linear.zero_weight = True
        if self.residual is not None:
            self.residual.torch_default = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.residual is None else self.residual(x)
        return residual + nn.functional.silu(self.linear(x))


class MultiHead(PreTrainedModel):
    """K heads; head k (0-based) maps f_t (and, sequential, the embeddings of the k + 1 tokens
    x_{t+1} .. x_{t+k+1}) to the feature whose `lm_head` read-out predicts x_{t+k+2}."""

    config_class = MultiHeadConfig
    base_model_prefix = "head"

    def __init__(self, config: MultiHeadConfig):
        super().__init__(config)
        hidden = config.hidden_size
        self.blocks = nn.ModuleList(
            ResBlock(hidden, (k + 1) * hidden if config.sequential else 0)
            for k in range(config.heads)
        )
        self.post_init()

    def _init_weights(self, module):
        """W at zero (a fresh Medusa head is f_t + SiLU(b), as the release's); Hydra's residual
        map as PyTorch initialises a linear layer (its release's). transformers' init functions
        leave weights loaded from a checkpoint alone."""
        if getattr(module, "torch_default", False):
            module.reset_parameters()
            return
        super()._init_weights(module)
        if getattr(module, "zero_weight", False):
            nn.init.zeros_(module.weight)

    def head(self, k: int, features: torch.Tensor, tokens: torch.Tensor | None = None):
        """Head k over features [..., H] and (sequential) the token embeddings [..., k + 1, H]
        of x_{t+1} (the target's token) .. x_{t+k+1} (the tokens drafted before it)."""
        x = features
        if self.config.sequential:
            if tokens is None or tokens.shape[-2] != k + 1:
                raise ValueError(f"Hydra's head {k} reads the embeddings of {k + 1} tokens")
            x = torch.cat([features, tokens.flatten(-2)], dim=-1)
        return self.blocks[k](x)
