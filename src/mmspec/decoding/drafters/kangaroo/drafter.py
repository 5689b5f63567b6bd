"""Kangaroo's drafter: the target's own first layers plus a small adapter (self-speculative).

Kangaroo (Liu et al. 2024; release `kangaroo/kangaroo_model.py`): the draft is the target's
shallow sub-network (its embedding and first `kangaroo_layers` decoder layers, 2 in the release
for 7B models) followed by a trained adapter (one attention-only Llama layer and a norm,
`kangaroo.net`) and the target's `lm_head`. As the release's `kangaroo_forward`
(`evaluation/inference_kangaroo.py`) does, every draft token is drafted, and drafting stops
after the first one whose top-1 probability is below `kangaroo_exit` (0.6), or after gamma (6)
tokens: `expand` returns None (the drafter protocol's early stop) when the last drafted token's
distribution fell below it, before any forward. The adapter is
the only trained part; it is saved alone and joined to the target's layers when loaded, so the
shared layers are the target's own modules (no copy of their weights). Only targets whose
decoder layers are Llama's take the adapter (LLaVA's Vicuna, the toy models).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mmspec.decoding import catalog
from mmspec.decoding.component import NUMBER, Param, TargetFacts, Values, values
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import DecoderDrafter
from mmspec.decoding.drafters.trained import HEAD_TRAINING, HeadDrafter
from mmspec.decoding.lazy import nn

if TYPE_CHECKING:
    from mmspec.decoding.drafters.kangaroo.net import KangarooAdapter

# Kangaroo (its release for 7B models): the target's first 2 layers and an adapter; drafting
# stops below a top-1 probability of 0.6 (on a chain) or after gamma tokens
LAYERS = Param("kangaroo_layers", int, 2, "target layers the draft runs before the adapter", low=1)
EXIT = Param(
    "kangaroo_exit",
    NUMBER,
    0.6,
    "the draft's top-1 probability below which a chain stops",
    low=0,
    high=1,
    meaning="is a probability",
)


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


@catalog.register
class KangarooDrafter(HeadDrafter, DecoderDrafter):
    """Drafts with the shallow stack as a `DecoderDrafter` does, over the target's own prompt."""

    name = "kangaroo"
    params = (*HEAD_TRAINING, LAYERS, EXIT)
    training = (*(p.key for p in HEAD_TRAINING), "kangaroo_layers")
    description = "the target's first layers and a trained adapter (self-speculative)"
    source = "Kangaroo's release for 7B models (2 layers, exit 0.6, at most 6 tokens)"

    @classmethod
    def reads(cls, spec: Values) -> tuple[Param, ...]:
        """Its early exit stops a chain; other trees do not read it."""
        return cls.params if spec.tree == "chain" else cls.params[:-1]

    @classmethod
    def check_target(cls, spec: Values, target: TargetFacts) -> None:
        layers = spec.of(LAYERS)
        if target.layers is not None and not layers < target.layers:
            raise ValueError(
                f"kangaroo_layers={layers} must be below the {target.layers} "
                f"layers of target {target.ref!r} (the draft runs its first layers, then the "
                "adapter)"
            )

    network_class = "mmspec.decoding.drafters.kangaroo.net:KangarooAdapter"
    config_class = "mmspec.decoding.drafters.kangaroo.net:KangarooConfig"
    blocks = 1  # the adapter's one layer
    loss_class = "mmspec.decoding.drafters.kangaroo.loss:AdapterLoss"

    @classmethod
    def network_options(cls, spec: Values) -> dict:
        return {"exit_layer": int(spec.of(LAYERS))}

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        # read on chains only (`reads`): other trees expand every level they grow, so a spec
        # without it exits never (0), not at the chain's default
        return cls(head, target, temperature, float(spec.of(EXIT)) if EXIT.key in spec else 0.0)

    @classmethod
    def random_network(cls, target_config, spec: Mapping, target: str):
        """Its exit layer inside the target (a tiny one may have fewer layers than the default)."""
        text = getattr(target_config, "text_config", None) or target_config
        exit_layer = min(values(spec).of(LAYERS), text.num_hidden_layers - 1)
        return cls.new_network(target_config, {**spec, "kangaroo_layers": exit_layer}, target)

    def __init__(
        self, adapter: KangarooAdapter, target: Decoder, temperature: float, exit_below=0.0
    ):
        stack = shallow_stack(target.stack, adapter)
        decoder = Decoder(target.model, parts=(stack, target.lm_head, target.embed))
        super().__init__(decoder, temperature)
        self.exit_below = exit_below
        self.last_top = 1.0  # top-1 probability of the distribution last drafted from

    def root(self, sampler):
        q = super().root(sampler)
        self.last_top = float(q.max()) if self.exit_below else 1.0
        return q

    def expand(self, tree, nodes: list[int]):
        """The next distributions, or None (stop drafting, no forward) when the distribution the
        last token was drafted from had a top-1 probability below `exit_below`: that token is
        still proposed (the release checks a token's score before drafting the next one)."""
        if self.exit_below and self.last_top < self.exit_below:
            return None
        q = super().expand(tree, nodes)
        self.last_top = float(q.max()) if self.exit_below else 1.0
        return q
