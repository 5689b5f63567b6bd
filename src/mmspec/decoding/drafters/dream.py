"""DREAM's drafter: EAGLE's entries, with the target's features fused in by cross-attention.

The head (DREAM, Section 3.1; release `model/cnets.py` as the notes describe it): an initial
decoder block over the entry stream (entry j = fc([embedding of token j + 1, feature f_j]), as
EAGLE's), a cross-attention block whose queries are the stream and whose keys and values are the
target's cached last-layer features (RMSNorm on queries and keys; the attention and MLP outputs
enter the stream through tanh gates initialised at 0, so training starts from the plain decoder
stack), a final decoder block, a norm, and the target's `lm_head`. Entry j attends to the
target's features of positions <= j: the verified context, never a drafted token's.

Visual token compression (Section 3.3): `dream_vtc` is the share of the prompt's visual tokens
kept in the cross-attention memory, those receiving the most attention from the target's text
queries at prefill (the release leaves its call commented out; mmspec runs it). The paper also
appends the draft's own last feature to the memory; here the drafted tokens' features reach a
later entry through the decoder blocks' self-attention instead.

The intermediate output (after the cross-attention block) is what the intermediate-feature loss
supervises in training (`training.heads`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmspec.decoding import catalog
from mmspec.decoding.component import NUMBER, TARGET_ATTENTION, Param
from mmspec.decoding.drafters.eagle import EagleDrafter
from mmspec.decoding.drafters.trained import HEAD_NOISE, HEAD_TRAINING
from mmspec.lazy import inference_mode, torch

if TYPE_CHECKING:
    from mmspec.decoding.drafters.dream_net import DreamHead


@catalog.register
class DreamDrafter(EagleDrafter):
    """EAGLE's drafting over a `DreamHead`, with the target's verified features as the
    cross-attention memory (visual tokens compressed to the share `vtc` at prefill)."""

    name = "dream"
    # DREAM (its Section 4.1 and the notes on its release): the cross-attention block on, the
    # intermediate feature of the layer with the lowest attention entropy per token ("entropy";
    # "fixed": the layer at half the target's depth, the paper's Static-50%; "none": no
    # intermediate loss), 75% of the visual tokens kept in the cross-attention memory (VTC,
    # applied when drafting).
    params = (
        *HEAD_TRAINING,
        HEAD_NOISE,
        Param("dream_cross", bool, True, "the cross-attention block"),
        Param(
            "dream_intermediate",
            str,
            "entropy",
            "which target layer gives the intermediate feature",
            choices=("entropy", "fixed", "none"),
        ),
        Param(
            "dream_vtc",
            NUMBER,
            0.75,
            "share of visual tokens kept in the cross-attention memory",
            low=0,
            high=1,
            low_open=True,
            meaning="is the share of visual tokens kept",
        ),
    )
    training = (*(p.key for p in HEAD_TRAINING), "head_noise", "dream_cross", "dream_intermediate")
    drafts_images = False
    description = "DREAM's cross-attention head over the target's verified features"
    source = "DREAM, Section 4.1 (tree k 4, depth 6, 32 tokens; VTC 75%)"

    @classmethod
    def requirements(cls, spec: dict) -> frozenset[str]:
        """Compressing the visual tokens ranks them by the target's attention at prefill."""
        if spec.get("dream_vtc", 1.0) < 1:
            return cls.requires | {TARGET_ATTENTION}
        return cls.requires

    loss_weights = (0.2, 0.2, 1.0)  # DREAM, Section 4.1
    network_class = "mmspec.decoding.drafters.dream_net:DreamHead"
    config_class = "mmspec.decoding.drafters.dream_net:DreamHeadConfig"
    blocks = 2  # an initial and a final decoder block around the cross-attention block

    @classmethod
    def network_options(cls, spec: dict) -> dict:
        return {"cross": bool(spec.get("dream_cross", True))}

    @classmethod
    def build(cls, spec: dict, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(head, target, temperature, float(spec.get("dream_vtc", 1.0)))

    @classmethod
    def random_network(cls, target_config, spec: dict, target: str):
        """Its gates open (a new head's are closed: the cross-attention would not take part)."""
        head = cls.new_network(target_config, spec, target)
        with torch.no_grad():
            for name, parameter in head.named_parameters():
                if name.endswith("_gate"):
                    parameter.fill_(0.5)
        return head

    @classmethod
    def collection(cls, training: dict) -> dict:
        return {"intermediate": training.get("dream_intermediate", "none"), "exit_layer": 0}

    def __init__(self, head: DreamHead, target, temperature: float, vtc: float = 1.0):
        super().__init__(head, target, temperature)
        self.vtc = vtc
        self.stack = head.model
        self.memory_positions = 0  # target positions the memory covers (the next one to add)

    def start(self, prompts, first_token: int, target) -> None:
        super().start(prompts, first_token, target)
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
        self.stack.memory = None
        self._remember(target.hidden[positions.to(target.hidden.device)], positions)
        self.memory_positions = len(prompt)

    @inference_mode
    def _remember(self, features: torch.Tensor, positions: torch.Tensor) -> None:
        keys, values = self.stack.cross.project(features.to(self.head.dtype))
        positions = positions.to(keys.device)
        if self.stack.memory is not None:
            old_k, old_v, old_p = self.stack.memory
            keys, values = torch.cat([old_k, keys], 1), torch.cat([old_v, values], 1)
            positions = torch.cat([old_p, positions])
        self.stack.memory = (keys, values, positions)

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """EAGLE's commit; the verified features (root and accepted nodes) join the memory."""
        super().commit(tree, path, next_token, target)
        if self.stack.cross is None:
            return
        n = target.hidden.shape[0]
        positions = torch.arange(self.memory_positions, self.memory_positions + n)
        self._remember(target.hidden, positions)
        self.memory_positions += n
