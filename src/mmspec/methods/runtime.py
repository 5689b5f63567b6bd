"""Turn a resolved method spec into the objects the decoding loops run, and run one sample."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from mmspec.decoding.acceptance import make_rule
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import ModelDrafter
from mmspec.decoding.loops import Generation, decode_ar, decode_speculative
from mmspec.decoding.trees import make_tree_policy
from mmspec.decoding.views import (
    TARGET_GUIDED_VIEWS,
    FullView,
    ImageInput,
    ViewContext,
    make_view,
    parse_views,
)
from mmspec.decoding.weights import make_policy
from mmspec.models.visual import projector_of


@dataclass
class Sample:
    """One sample-turn ready to decode: prompt text, and its images as cached for each model."""

    text: str
    target_images: list[ImageInput]
    draft_images: list[ImageInput]


class MethodRunner:
    """Decodes samples with one method spec over a target (and, if drafted, a draft) model."""

    def __init__(self, spec: dict, target_model, draft_model, tokenizer, image_token: str):
        self.spec = spec
        self.temperature = float(spec["temperature"])
        self.target = Decoder(target_model)
        self.target_ctx = ViewContext(tokenizer, self.target.embed, image_token)
        self.full = FullView()
        self.drafter = None
        self.score_visual = False
        if spec["drafter"] == "model":
            if draft_model is None:
                raise ValueError(f"method {spec['method']!r} needs a draft model")
            decoder = Decoder(draft_model)
            vocab = draft_model.get_output_embeddings().out_features
            self.drafter = ModelDrafter(
                decoder, self.temperature, make_policy(spec, vocab), int(spec["window"])
            )
            self.views = [
                make_view(v, float(spec["keep"]), float(spec["drop"]), float(spec["mass"]))
                for v in parse_views(spec["views"])
            ]
            # views built from the target's prefill (S) need its text-to-visual attention
            self.score_visual = bool(set(spec["views"]) & TARGET_GUIDED_VIEWS)
            project = projector_of(draft_model) if "P" in spec["views"] else None
            self.draft_ctx = ViewContext(tokenizer, decoder.embed, image_token, project)
            self.policy = make_tree_policy(spec)
            self.rule = make_rule(spec["acceptance"])
        elif spec["drafter"] != "none":
            raise ValueError(f"unknown drafter {spec['drafter']!r}")
        self.last_draft_visual = 0
        self.last_target_visual = 0

    def target_prompt(self, sample: Sample):
        prompt = self.full.build(sample.text, sample.target_images, self.target_ctx)
        self.last_target_visual = prompt.n_visual
        return prompt

    def draft_prompts(
        self, sample: Sample, attention: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The sample in each of the drafter's views (one cache row each); `attention` is the
        target prefill's score of each visual token, split here over the images (view S)."""
        images = sample.draft_images
        if attention is not None:
            sizes = [i.embeds.shape[0] for i in sample.target_images]
            parts = torch.split(attention, sizes)
            images = [replace(i, attention=a) for i, a in zip(images, parts, strict=True)]
        prompts = [v.build(sample.text, images, self.draft_ctx) for v in self.views]
        # visual tokens the draft reads: summed over its views (an ensemble pays for each row)
        self.last_draft_visual = sum(p.n_visual for p in prompts)
        return [p.embeds for p in prompts]

    def decode(self, sample: Sample, max_new: int, stop: set[int], generator) -> Generation:
        """Decode one sample with this method."""
        prompt = self.target_prompt(sample)
        if self.drafter is None:
            self.last_draft_visual = 0
            return decode_ar(self.target, prompt.embeds, max_new, stop, self.temperature, generator)
        scored = self.score_visual and prompt.n_visual > 0
        return decode_speculative(
            self.target,
            prompt.embeds,
            self.drafter,
            lambda attention: self.draft_prompts(sample, attention),
            self.policy,
            self.rule,
            max_new,
            stop,
            self.temperature,
            generator,
            score_visual=prompt.visual if scored else None,
        )

    def decode_ar(self, sample: Sample, max_new: int, stop: set[int], generator) -> Generation:
        """The paired AR baseline on the same target and sample."""
        prompt = self.target_prompt(sample)
        return decode_ar(self.target, prompt.embeds, max_new, stop, self.temperature, generator)

    def draft_forward_stats(self) -> tuple[int, float]:
        if self.drafter is None:
            return 0, 0.0
        return self.drafter.forwards, self.drafter.forward_s

    def reset_stats(self) -> None:
        if self.drafter is not None:
            self.drafter.forwards, self.drafter.forward_s = 0, 0.0
