"""Medusa's and Hydra's drafters: K heads on the target's last feature, head k drafting the token
k + 2 positions after that feature, no draft forward over the sequence.

Medusa (Cai et al. 2024, Section 2.1.1; release `medusa/model/medusa_model.py`): head k is a
ResBlock (x + SiLU(Wx), W initialised at zero) over the feature f_t that emitted the token
x_{t+1}, read out to the vocabulary; it predicts x_{t+k+2} whatever was drafted before it, so a
tree's nodes of one depth share one distribution. Every head reads out through the target's own
`lm_head`, as the release's `medusa_model_legacy.py` (`MedusaModel.forward`) and its
`train_legacy.py` do (its first release and `medusa_model.py` train one output layer per head,
initialised from it: a vocabulary-sized matrix per head, not built here).
Hydra (Ankner et al. 2024; release `hydra/model/hydra_heads/mlp_head.py`, `HydraMLP` with
`grounded_heads`): head k also reads the embeddings of x_{t+1} (the target's own token, the
tree's root) and of the tokens drafted before it, x_{t+2} .. x_{t+k+1}: a ResBlock over
[f_t, e(x_{t+1}), ..., e(x_{t+k+1})] whose residual is a learned linear map (Hydra++'s prefix
attention layer is not built). A proposal cannot be deeper than the K heads. Both releases
evaluate on Medusa's 63-node tree `mc_sim_7b_63` (`MEDUSA_TREE`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mmspec.decoding import catalog
from mmspec.decoding.component import NUMBER, Param, Values
from mmspec.decoding.drafters.trained import HEAD_TRAINING, HeadDrafter
from mmspec.decoding.lazy import torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.timing import sync

if TYPE_CHECKING:
    from mmspec.decoding.drafters.medusa.net import MultiHead

# Medusa and Hydra: 5 heads (Medusa's vicuna-7b release; its tree uses the first 4)
HEADS = Param("medusa_heads", int, 5, "heads, each drafting one position further", low=1)
# No feature noise by default: the heads read the target's verified feature, never one they
# predicted (EAGLE's reason for its noise), and neither release adds any (Medusa's
# `train_legacy.py`; Hydra's `train.py`, `noise_alpha` 0)
NOISE = Param(
    "head_noise",
    NUMBER,
    0.0,
    "width of the uniform noise on input features",
    low=0,
    meaning="is a noise width",
)

# Medusa's tree (its release's `medusa/model/medusa_choices.py`, `mc_sim_7b_63`, the default of
# its `llm_judge/gen_model_answer_medusa.py`; Hydra's `hydra_choices.py` holds the same one):
# 63 nodes, 4 levels, as paths of child ranks
MEDUSA_TREE = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4],
    [2, 0], [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8],
    [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0],
    [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0],
    [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
    [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0],
    [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]  # fmt: skip


class MultiHeadDrafter(HeadDrafter):
    """Drafts with a `MultiHead` from the target's last verified feature."""

    def __init__(self, head: MultiHead, target, temperature: float):
        super().__init__(temperature)
        self.head, self.target = head, target
        self.q_temperature = temperature if temperature > 0 else 1.0
        self.feature: torch.Tensor | None = None
        self.token = 0  # the target's token x_{t+1} that `feature` emitted (the tree's root)

    def _q(self, k: int, paths: list[list[int]] | None, n: int) -> torch.Tensor:
        """q [n, V] of head k for n nodes (Hydra: each node's drafted tokens from depth 1)."""
        start = time.perf_counter()
        features = self.feature.to(self.head.dtype).expand(n, -1)
        tokens = None
        with torch.inference_mode():
            if self.head.config.sequential:
                ids = torch.tensor([[self.token, *p] for p in (paths or [[]] * n)])
                tokens = self.target.embed(ids.to(self.target.device)).to(self.head.dtype)
            logits = self.target.head_logits(self.head.head(k, features, tokens))
        sync(self.target.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        return distribution(logits, self.q_temperature)

    def start(self, prompts, first_token: int, target) -> None:
        self.feature, self.token = target.hidden[-1], first_token

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
        paths = None
        if self.head.config.sequential:
            paths = [[tree.tokens[a] for a in [*reversed(tree.ancestors(n)), n]] for n in nodes]
        return self._q(k, paths, len(nodes))

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """The next proposal drafts from the feature that emitted `next_token`."""
        self.feature, self.token = target.hidden[-1], next_token


@catalog.register
class MedusaDrafter(MultiHeadDrafter):
    """Medusa: head k drafts the token k + 2 after the feature, independently of the others."""

    name = "medusa"
    params = (*HEAD_TRAINING, NOISE, HEADS)
    training = tuple(p.key for p in params)
    description = "Medusa's K heads on the target's last feature"
    source = "Medusa's vicuna-7b release (5 heads)"

    sequential = False  # each head reads the target's feature alone (Hydra's read the drafts)
    network_class = "mmspec.decoding.drafters.medusa.net:MultiHead"
    config_class = "mmspec.decoding.drafters.medusa.net:MultiHeadConfig"
    blocks = 0
    loss_class = "mmspec.decoding.drafters.medusa.loss:MedusaLoss"

    @classmethod
    def network_options(cls, spec: Values) -> dict:
        return {"heads": int(spec.of(HEADS)), "sequential": cls.sequential}

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(head, target, temperature)

    @classmethod
    def random_network(cls, target_config, spec: Mapping, target: str):
        """Its heads' weights random (a new head's are zero: every head would read out f_t)."""
        head = cls.new_network(target_config, spec, target)
        with torch.no_grad():
            for name, parameter in head.named_parameters():
                if "blocks" in name and name.endswith("weight"):
                    parameter.normal_(0, 0.5)
        return head

    @classmethod
    def check(cls, spec: Values) -> None:
        depth = catalog.get("tree", spec.tree).max_depth(spec)
        heads = spec.of(HEADS)
        if depth is not None and depth > heads:
            raise ValueError(
                f"a {cls.name} head drafts at most medusa_heads={heads} tokens deep, and tree "
                f"{spec.tree!r} drafts {depth}"
            )


@catalog.register
class HydraDrafter(MedusaDrafter):
    """Hydra: Medusa's heads made sequentially dependent."""

    name = "hydra"
    description = "Hydra's sequentially dependent heads"
    source = "Hydra's release (grounded MLP heads); Medusa's tree"
    sequential = True
    loss_class = "mmspec.decoding.drafters.medusa.loss:HydraLoss"
