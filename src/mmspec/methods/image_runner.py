"""Run one method spec on image generation: a caption in, a fixed-length grid of codes out.

Target and draft are guided (`decoding.guidance`): each decodes a conditional and an
unconditional row in one batched forward and presents the guided logits, restricted to the image
codes, as one row. The loops, tree policies and acceptance rules are the text path's, unchanged;
LANTERN's rule reads the target's codebook.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.decoding.acceptance import make_rule
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.guidance import GuidedDecoder
from mmspec.decoding.loops import Generation, decode_ar, decode_speculative
from mmspec.decoding.trees import make_tree_policy
from mmspec.decoding.weights import make_policy
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
        spec: dict,
        target: ImageGenerator,
        draft: ImageGenerator | None,
        cfg: float,
        top_k: int = 0,
    ):
        self.spec = spec
        self.method = MethodSpec.parse(spec)
        self.temperature = self.method.temperature
        self.generator = target
        self.target = GuidedDecoder(target.decoder(), cfg, target.code_range, top_k)
        self.drafter = None
        self.draft = draft
        if spec["drafter"] == "model":
            if draft is None:
                raise ValueError(f"method {spec['method']!r} needs a draft model")
            if spec["views"] != "M":
                raise ValueError(
                    f"method {spec['method']!r} drafts from views {spec['views']!r}; an image "
                    "generation prompt is a caption with no image to view otherwise (views M)"
                )
            if not target.shares_codes_with(draft):
                raise ValueError(
                    "the draft generator's codes or codebook differ from the target's: "
                    "speculative decoding compares code ids"
                )
            decoder = GuidedDecoder(draft.decoder(), cfg, draft.code_range, top_k)
            self.drafter = ModelDrafter(
                decoder, self.temperature, make_policy(spec, draft.vocab), int(spec["window"])
            )
            self.policy = make_tree_policy(spec)
            self.rule = make_rule(spec, codebook=target.codebook())
        elif spec["drafter"] != "none":
            raise ValueError(f"unknown drafter {spec['drafter']!r}")
        # prompts are text: no visual tokens on either side (columns of the samples table)
        self.last_draft_visual = self.last_target_visual = 0

    @property
    def grid(self) -> int:
        return self.generator.grid

    def prompt(self, caption: str) -> ImagePrompt:
        draft = self.draft.prompt_embeds(caption) if self.drafter is not None else []
        return ImagePrompt(caption, self.generator.prompt_embeds(caption), draft)

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
        """The paired AR baseline: the guided target alone."""
        return decode_ar(self.target, prompt.target, self.grid, set(), self.temperature, sampler)
