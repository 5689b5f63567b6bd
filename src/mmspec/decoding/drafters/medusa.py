"""Medusa's and Hydra's drafters: K heads on the target's last feature, head k drafting the
token k positions ahead, no draft forward over the sequence.

Medusa (Cai et al. 2024, Section 2.1.1; release `medusa/model/medusa_model.py`): head k is a
ResBlock (x + SiLU(Wx), W initialised at zero) over the feature f_t that emitted the token
x_{t+1}, read out to the vocabulary; it predicts x_{t+k+1} whatever was drafted before it, so a
tree's nodes of one depth share one distribution. Here every head reads out through the
target's own `lm_head` (the release trains one output layer per head, initialised from it).
Hydra (Ankner et al. 2024): head k also reads the embeddings of the tokens its ancestors drafted
(sequentially dependent heads): an MLP over [f_t, e(x_{t+2}), ..., e(x_{t+k})] (Hydra++'s prefix
attention layer is not built). A proposal cannot be deeper than the K heads.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from transformers import PreTrainedModel

from mmspec.decoding.drafters import Drafter
from mmspec.decoding.drafters.eagle import EagleHeadConfig
from mmspec.decoding.probability import distribution
from mmspec.decoding.timing import sync


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


class MultiHeadDrafter(Drafter):
    """Drafts with a `MultiHead` from the target's last verified feature."""

    def __init__(self, head: MultiHead, target, temperature: float):
        super().__init__(temperature)
        self.head, self.target = head, target
        self.q_temperature = temperature if temperature > 0 else 1.0
        self.feature: torch.Tensor | None = None

    def _q(self, k: int, ancestors: torch.Tensor | None, n: int) -> torch.Tensor:
        """q [n, V] of head k for n nodes (ancestors [n, k, H], or None for Medusa)."""
        start = time.perf_counter()
        features = self.feature.to(self.head.dtype).expand(n, -1)
        with torch.inference_mode():
            logits = self.target.head_logits(self.head.head(k, features, ancestors))
        sync(self.target.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        return distribution(logits, self.q_temperature)

    def start(self, prompts, first_token: int, target) -> None:
        self.feature = target.hidden[-1]

    def root(self, sampler) -> torch.Tensor:
        return self._q(0, None, 1)[0]

    def expand(self, tree, nodes: list[int]) -> torch.Tensor:
        """Nodes of one depth at a time (a head per depth); each node's q [n, V]."""
        depths = {len(tree.ancestors(n)) + 1 for n in nodes}
        if len(depths) != 1:
            raise ValueError("a multi-token head expands the nodes of one depth at a time")
        k = depths.pop()
        if k >= self.head.config.heads:
            raise ValueError(
                f"a proposal {k + 1} tokens deep needs {k + 1} heads; this head has "
                f"{self.head.config.heads}"
            )
        ancestors = None
        if self.head.config.sequential:
            paths = [[*reversed(tree.ancestors(n)), n] for n in nodes]
            ids = torch.tensor([[tree.tokens[a] for a in p] for p in paths])
            with torch.inference_mode():
                ancestors = self.target.embed(ids.to(self.target.device))
        return self._q(k, ancestors, len(nodes))

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """The next proposal drafts from the feature that emitted `next_token`."""
        self.feature = target.hidden[-1]
