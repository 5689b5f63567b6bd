"""Run one method spec on image generation: a caption in, a fixed-length grid of codes out.

Target and draft are guided (`decoding.guidance`): each decodes a conditional and an
unconditional row in one batched forward and presents the guided logits, restricted to the image
codes, as one row. The loops, tree policies and acceptance rules are the text path's, unchanged;
LANTERN's rule reads the target's codebook. The drafter is any drafter declaring
`drafts_images`, built as the text path builds it (`Drafter.build`): a draft generator sharing
the target's codes (guided as the target is), or EAGLE's head trained on the target's own
features (LANTERN's setting), which reads both of the target's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.decoding.component import DRAFT_MODEL, TRAINED_HEAD
from mmspec.decoding.guidance import GuidedDecoder
from mmspec.decoding.loops import (
    Generation,
    argmax_misses,
    decode_ar,
    decode_speculative,
    probe_ar,
)
from mmspec.decoding.trees import drafting_temperature
from mmspec.methods.components import image_drafters
from mmspec.methods.runtime import DraftCounters
from mmspec.methods.spec import MethodSpec
from mmspec.models.image_generation import ImageGenerator


@dataclass
class ImagePrompt:
    """One caption as each model's (conditional, unconditional) prompt embeddings."""

    caption: str
    target: list[torch.Tensor]
    draft: list[torch.Tensor]


class ImageMethodRunner(DraftCounters):
    """Generates images with one method spec over a target generator (and, if drafted, a draft
    generator sharing its codes), guided at scale `cfg` on both, sampling among each guided
    distribution's `top_k` codes when it is > 0."""

    def __init__(
        self,
        method: MethodSpec,
        target: ImageGenerator,
        draft: ImageGenerator | None,
        cfg: float,
        top_k: int = 0,
        head=None,
    ):
        """`head`: the trained head of a method that drafts with one (EAGLE's)."""
        self.method = method
        self.temperature = method.temperature
        self.generator = target
        self.target = GuidedDecoder(target.decoder(), cfg, target.code_range, top_k)
        self.drafter = None
        self.draft = draft
        # the temperature of the drafter's q: its tree's ranking, or a chain's draws
        tree = method.part("tree")
        drafting = drafting_temperature(tree.component, self.temperature) if tree else 0.0
        if not method.is_ar:
            if not method.part("drafter").component.drafts_images:
                raise ValueError(
                    f"method {method.method!r} drafts with {method.drafter!r}, which drafts "
                    f"text only; image generation drafts with one of {image_drafters()}"
                )
            guided_draft = None
            if method.needs(DRAFT_MODEL):
                guided_draft = self._guided_draft(method, target, draft, cfg, top_k)
            if method.needs(TRAINED_HEAD) and head is None:
                raise ValueError(f"method {method.method!r} needs its trained head")
            self.drafter = method.build_drafter(
                target=self.target, draft=guided_draft, head=head, temperature=drafting
            )
        if self.drafter is not None:
            self.policy = method.part("tree").build()
            self.rule = method.part("acceptance").build(codebook=target.codebook())
        # prompts are text: no visual tokens on either side (columns of the samples table)
        self.last_draft_visual = self.last_target_visual = 0

    @staticmethod
    def _guided_draft(method: MethodSpec, target: ImageGenerator, draft, cfg: float, top_k: int):
        """The draft generator, guided as the target is: it must share the target's codes and
        draft from the caption alone (view M)."""
        if draft is None:
            raise ValueError(f"method {method.method!r} needs a draft model")
        if method.views != "M":
            raise ValueError(
                f"method {method.method!r} drafts from views {method.views!r}; an image "
                "generation prompt is a caption with no image to view otherwise (views M)"
            )
        if not target.shares_codes_with(draft):
            raise ValueError(
                "the draft generator's codes or codebook differ from the target's: "
                "speculative decoding compares code ids"
            )
        return GuidedDecoder(draft.decoder(), cfg, draft.code_range, top_k)

    @property
    def grid(self) -> int:
        return self.generator.grid

    def prompt(self, caption: str) -> ImagePrompt:
        target = self.generator.prompt_embeds(caption)
        # a head reads the target's own prompt pair
        draft = self.draft.prompt_embeds(caption) if self.draft is not None else target
        return ImagePrompt(caption, target, draft if self.drafter is not None else [])

    def decode(self, prompt: ImagePrompt, sampler) -> Generation:
        """One image's codes with this method."""
        if self.drafter is None:
            return self.decode_ar(prompt, sampler)
        return decode_speculative(
            self.target,
            prompt.target,
            self.drafter,
            prompt.draft,
            self.policy,
            self.rule,
            self.grid,
            set(),
            self.temperature,
            sampler,
        )

    def decode_ar(self, prompt: ImagePrompt, sampler) -> Generation:
        """AR: the guided target alone (the timing reference of a method's speedup)."""
        return decode_ar(self.target, prompt.target, self.grid, set(), self.temperature, sampler)

    def probe_ar(self, prompt: ImagePrompt, first_code: int, steps: int, sampler) -> Generation:
        """AR's first `steps` codes of the prompt, just after this runner decoded it (the
        target's cache still holds the prompt: `loops.probe_ar`)."""
        length = max(embeds.shape[0] for embeds in prompt.target)
        steps = min(steps, self.grid - 1)
        return probe_ar(self.target, length, first_code, steps, self.temperature, sampler)

    def argmax_misses(self, prompt: ImagePrompt, codes: list[int]) -> list:
        """Where the guided target, fed `codes` one at a time as AR decodes, would not have
        emitted them (`loops.argmax_misses`)."""
        return argmax_misses(self.target, prompt.target, codes)
