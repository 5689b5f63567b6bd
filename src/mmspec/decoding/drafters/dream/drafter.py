"""DREAM's drafter: a head over token embeddings, fed the target's features by cross-attention.

The head (`dream.net`, as DREAM's release builds it: `model/cnets.py`, `Model`): a
decoder block over the token embeddings alone, a gated cross-attention block whose keys and
values are the target's features, a final decoder block, a norm, and the target's `lm_head`.
The target's features enter only through the cross-attention (the paper, Section 3.1, contrasts
this with EAGLE's concatenation of embedding and feature).

Drafting (the release's `topK_genrate`, cnets.py l. 831-1009): the memory holds the target's
verified features (entry j sees those at positions <= j); a drafted node is fed its token's
embedding alone, and its parent's normed output joins the memory as one entry that the node and
its descendants see (cnets.py l. 876, 886, 910; the paper's Figure 3(c): the latest draft
feature appended to the keys and values). After verification the drafted entries go and the
accepted positions' true features join the memory. The release re-feeds the root token twice
after each verification (`model/utils.py` l. 312 and 500-502 both append it to
`draft_input_ids`); that is not copied: each accepted token is fed once, at its own position.

Visual token compression (Section 3.3): `dream_vtc` is the share of the prompt's visual tokens
kept in the cross-attention memory, those receiving the most attention from the target's text
queries at prefill, averaged over its layers (the scores SpecVLM's view S uses). The paper and
the release score by the last layer's attention summed over all queries and subsample the
draft's input tokens (release `model/utils.py` `prune_image_tokens`, l. 234-291, over
`modeling_llama_kv.py` `compute_attention_scores`, l. 679-690); the release's call is commented
out (`utils.py` l. 308) and would not run as written (it prunes the embeddings, not the features
that go with them), so mmspec keeps its own: the features enter the head only through the
memory, and pruning the memory is what shortens the draft's reading of the image.

Training (`dream.loss`): the intermediate output (after the cross-attention block) is what
the intermediate-feature loss supervises; `dream_loss` weighs the losses as the release does
("release") or as the paper states ("paper").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from mmspec.decoding import catalog
from mmspec.decoding.component import NUMBER, TARGET_ATTENTION, Param, Values
from mmspec.decoding.drafters.eagle.drafter import EagleDrafter
from mmspec.decoding.drafters.trained import HEAD_NOISE, HEAD_TRAINING
from mmspec.decoding.lazy import inference_mode, torch

if TYPE_CHECKING:
    from mmspec.decoding.drafters.dream.net import DreamHead


CROSS = Param("dream_cross", bool, True, "the cross-attention block")

INTERMEDIATE = Param(
    "dream_intermediate",
    str,
    "entropy",
    "which target layer gives the intermediate feature",
    choices=("entropy", "fixed", "none"),
)

FIXED_DEPTH = Param(
    "dream_fixed_depth",
    NUMBER,
    0.5,
    "share of the target's depth at which the fixed intermediate layer lies "
    "(`dream_intermediate: fixed`; Section 4.2's Static-25%, -50% and -75%): "
    "hidden_states[floor(share x layers)]",
    low=0,
    high=1,
    low_open=True,
    high_open=True,
    meaning="is a share of the target's depth",
)

LOSS = Param(
    "dream_loss",
    str,
    "release",
    "loss weighting: the release's (0.2 x feature and 1.0 x intermediate SmoothL1 over "
    "all padded positions, 1.0 x the KL averaged over the vocabulary) or the paper's "
    "(0.2, 0.2, 1.0 over the answer positions, the KL summed over the vocabulary)",
    choices=("release", "paper"),
)

VTC = Param(
    "dream_vtc",
    NUMBER,
    0.75,
    "share of visual tokens kept in the cross-attention memory",
    low=0,
    high=1,
    low_open=True,
    meaning="is the share of visual tokens kept",
)


@catalog.register
class DreamDrafter(EagleDrafter):
    """EAGLE's drafting over a `DreamHead`: entries are token embeddings, the target's verified
    features (visual tokens compressed to the share `vtc` at prefill) and the drafted path's
    own outputs the cross-attention memory."""

    name = "dream"
    # DREAM (its Section 4.1 and its release): the cross-attention block on, the intermediate
    # feature of the layer with the lowest attention entropy per token ("entropy"; "fixed": the
    # layer at the share `dream_fixed_depth` of the target's depth, by default half, the
    # paper's Static-50%; "none": no intermediate loss),
    # the release's loss weighting, 75% of the visual tokens kept in the cross-attention memory
    # (VTC, applied when drafting).
    params = (
        *HEAD_TRAINING,
        HEAD_NOISE,
        CROSS,
        INTERMEDIATE,
        FIXED_DEPTH,
        LOSS,
        VTC,
    )
    training = (
        *(p.key for p in HEAD_TRAINING),
        "head_noise",
        "dream_cross",
        "dream_intermediate",
        "dream_fixed_depth",
        "dream_loss",
    )
    drafts_images = False
    description = "DREAM's cross-attention head over the target's verified features"
    source = (
        "DREAM, Section 4.1 (tree k 4, depth 6, 32 tokens; VTC 75%); its release for the head "
        "(model/cnets.py Model), drafting (cnets.py topK_genrate), intermediate layers "
        "(ge_data/ge_data_all_llava_mix665k.py mid_feature_collect) and loss weighting "
        "(train/main_deepspeed.py compute_loss, compute_mid_loss)"
    )

    @classmethod
    def reads(cls, spec: Values) -> tuple[Param, ...]:
        """The fixed layer's depth only where the intermediate layer is fixed."""
        if spec.of(INTERMEDIATE) == "fixed":
            return cls.params
        return tuple(p for p in cls.params if p is not FIXED_DEPTH)

    @classmethod
    def requirements(cls, spec: Values) -> frozenset[str]:
        """Compressing the visual tokens ranks them by the target's attention at prefill."""
        if spec.of(VTC) < 1:
            return cls.requires | {TARGET_ATTENTION}
        return cls.requires

    network_class = "mmspec.decoding.drafters.dream.net:DreamHead"
    config_class = "mmspec.decoding.drafters.dream.net:DreamHeadConfig"
    blocks = 2  # an initial and a final decoder block around the cross-attention block
    loss_class = "mmspec.decoding.drafters.dream.loss:DreamLoss"

    @classmethod
    def network_options(cls, spec: Values) -> dict:
        return {"cross": bool(spec.of(CROSS))}

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(head, target, temperature, float(spec.of(VTC)))

    @classmethod
    def random_network(cls, target_config, spec: Mapping, target: str):
        """Its gates open (a new head's are closed: the cross-attention would not take part)."""
        head = cls.new_network(target_config, spec, target)
        with torch.no_grad():
            for name, parameter in head.named_parameters():
                if name.endswith("_gate"):
                    parameter.fill_(0.5)
        return head

    def __init__(self, head: DreamHead, target, temperature: float, vtc: float = 1.0):
        super().__init__(head, target, temperature)
        self.vtc = vtc
        self.stack = head.model
        # the drafter's own memory (the stack is shared by forks of a decoding's state: it is
        # installed there before each forward): verified features (keys, values [heads, M,
        # dim], target positions [M]), then one entry per fed drafted node (in `fed` order)
        self.memory = None
        self.drafted = None
        self.drafted_visible = None
        self.memory_positions = 0  # target positions the memory covers (the next one to add)

    def start(self, prompts, first_token: int, target) -> None:
        super().start(prompts, first_token, target)
        self.memory = self.drafted = None
        if self.stack.cross is None:
            return
        prompt = prompts[0]
        kept = torch.ones(len(prompt), dtype=torch.bool)
        attention = prompts.visual_attention
        if self.vtc < 1 and attention is not None and prompt.n_visual:
            visual = torch.nonzero(prompt.visual.cpu()).flatten()
            keep = max(1, round(len(visual) * self.vtc))
            dropped = visual[attention.cpu().argsort(descending=True)[keep:]]
            kept[dropped] = False
        positions = torch.nonzero(kept).flatten()
        self._remember(target.hidden[positions.to(target.hidden.device)], positions)
        self.memory_positions = len(prompt)

    @inference_mode
    def _remember(self, features: torch.Tensor, positions: torch.Tensor) -> None:
        keys, values = self.stack.cross.project(features.to(self.head.dtype))
        positions = positions.to(keys.device)
        if self.memory is not None:
            old_k, old_v, old_p = self.memory
            keys, values = torch.cat([old_k, keys], 1), torch.cat([old_v, values], 1)
            positions = torch.cat([old_p, positions])
        self.memory = (keys, values, positions)

    def _forward(self, vectors, **tree):
        """EAGLE's timed forward, with this drafter's memory installed on the stack."""
        self.stack.memory, self.stack.drafted = self.memory, self.drafted
        self.stack.drafted_visible = self.drafted_visible
        return super()._forward(vectors, **tree)

    @inference_mode
    def root(self, sampler) -> torch.Tensor:
        """EAGLE's root over the queued verified entries, no drafted memory yet."""
        self.drafted = self.drafted_visible = None
        return super().root(sampler)

    @inference_mode
    def expand(self, tree, nodes: list[int]) -> torch.Tensor:
        """A node's entry is its token's embedding alone; its parent's (normed) output joins the
        memory as one entry, seen by the node and its descendants (the release's `topK_genrate`,
        cnets.py l. 876, 886, 910: `input_hidden` goes to the cross-attention, the tree mask
        over it at l. 522-527)."""
        if self.stack.cross is not None:
            parents = torch.stack([self.out[tree.parents[n]][0] for n in nodes])  # [n, H]
            keys, values = self.stack.cross.project(parents.to(self.head.dtype))
            before = len(self.fed)
            offset = {f: i for i, f in enumerate(self.fed)}
            visible = torch.zeros(len(nodes), before + len(nodes), dtype=torch.bool)
            for j, node in enumerate(nodes):
                visible[j, [offset[a] for a in tree.ancestors(node) if a in offset]] = True
                visible[j, before + j] = True
            if self.drafted is not None:
                keys = torch.cat([self.drafted[0], keys], 1)
                values = torch.cat([self.drafted[1], values], 1)
            self.drafted, self.drafted_visible = (keys, values), visible
        return super().expand(tree, nodes)

    @inference_mode
    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """EAGLE's commit; the drafted memory goes, the verified features (root and accepted
        nodes) join the memory."""
        super().commit(tree, path, next_token, target)
        self.drafted = self.drafted_visible = None
        if self.stack.cross is None:
            return
        n = target.hidden.shape[0]
        positions = torch.arange(self.memory_positions, self.memory_positions + n)
        self._remember(target.hidden, positions)
        self.memory_positions += n
