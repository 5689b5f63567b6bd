"""Turn a resolved method spec into the objects the decoding loops run, and run one sample."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.decoding.acceptance import make_rule
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import ModelDrafter
from mmspec.decoding.loops import Generation, decode_ar, decode_speculative
from mmspec.decoding.trees import make_tree_policy
from mmspec.decoding.views import FullView, make_view


@dataclass
class Sample:
    """One sample-turn ready to decode: prompt text, and cached visual features per model."""

    text: str
    target_images: list[torch.Tensor]
    draft_images: list[torch.Tensor]


class MethodRunner:
    """Decodes samples with one method spec over a target (and, if drafted, a draft) model."""

    def __init__(self, spec: dict, target_model, draft_model, tokenizer, image_token: str):
        self.spec = spec
        self.temperature = float(spec["temperature"])
        self.tokenizer = tokenizer
        self.image_token = image_token
        self.target = Decoder(target_model)
        self.full = FullView()
        self.drafter = None
        if spec["drafter"] == "model":
            if draft_model is None:
                raise ValueError(f"method {spec['method']!r} needs a draft model")
            self.drafter = ModelDrafter(Decoder(draft_model), self.temperature)
            self.view = make_view(spec["view"])
            self.policy = make_tree_policy(spec)
            self.rule = make_rule(spec["acceptance"])
        elif spec["drafter"] != "none":
            raise ValueError(f"unknown drafter {spec['drafter']!r}")
        self.last_draft_visual = 0
        self.last_target_visual = 0

    def target_prompt(self, sample: Sample) -> torch.Tensor:
        prompt = self.full.build(
            sample.text, sample.target_images, self.tokenizer, self.target.embed, self.image_token
        )
        self.last_target_visual = prompt.n_visual
        return prompt.embeds

    def decode(self, sample: Sample, max_new: int, stop: set[int], generator) -> Generation:
        """Decode one sample with this method."""
        prompt = self.target_prompt(sample)
        if self.drafter is None:
            self.last_draft_visual = 0
            return decode_ar(self.target, prompt, max_new, stop, self.temperature, generator)
        draft_prompt = self.view.build(
            sample.text,
            sample.draft_images,
            self.tokenizer,
            self.drafter.decoder.embed,
            self.image_token,
        )
        self.last_draft_visual = draft_prompt.n_visual
        return decode_speculative(
            self.target,
            prompt,
            self.drafter,
            draft_prompt.embeds,
            self.policy,
            self.rule,
            max_new,
            stop,
            self.temperature,
            generator,
        )

    def decode_ar(self, sample: Sample, max_new: int, stop: set[int], generator) -> Generation:
        """The paired AR baseline on the same target and sample."""
        prompt = self.target_prompt(sample)
        return decode_ar(self.target, prompt, max_new, stop, self.temperature, generator)

    def draft_forward_stats(self) -> tuple[int, float]:
        if self.drafter is None:
            return 0, 0.0
        return self.drafter.forwards, self.drafter.forward_s

    def reset_stats(self) -> None:
        if self.drafter is not None:
            self.drafter.forwards, self.drafter.forward_s = 0, 0.0
