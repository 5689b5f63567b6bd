"""Turn a resolved method spec into the objects the decoding loops run, and run one sample."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from mmspec.decoding.component import DRAFT_MODEL, TARGET_ATTENTION, TRAINED_HEAD
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import HeadPrompts
from mmspec.decoding.loops import (
    Generation,
    argmax_misses,
    decode_ar,
    decode_speculative,
    probe_ar,
)
from mmspec.decoding.prompt import Prompt
from mmspec.decoding.trees import drafting_temperature
from mmspec.decoding.views import FullView, ImageInput, ViewContext
from mmspec.methods.spec import MethodSpec
from mmspec.models.visual import projector_of


@dataclass
class Sample:
    """One sample-turn ready to decode: prompt text, and its images as cached for each model."""

    text: str
    target_images: list[ImageInput]
    draft_images: list[ImageInput]
    # the target's prompt, built once and shared by the method and its paired AR run
    target: Prompt | None = field(default=None, repr=False)


def _builder(model, processor):
    """The family prompt builder of a multimodal model with a processor, else None."""
    if processor is None or not hasattr(model.config, "vision_config"):
        return None
    from mmspec.models.prompts import PromptBuilder

    return PromptBuilder(model, processor)


class DraftCounters:
    """The draft forwards of a runner's drafter (none for AR) and their time: T_q of Eq. 1."""

    drafter = None

    def draft_forward_stats(self) -> tuple[int, float]:
        if self.drafter is None:
            return 0, 0.0
        return self.drafter.forwards, self.drafter.forward_s

    def reset_stats(self) -> None:
        if self.drafter is not None:
            self.drafter.forwards, self.drafter.forward_s = 0, 0.0


class MethodRunner(DraftCounters):
    """Decodes samples with one method spec over a target (and, if drafted, a draft) model."""

    def __init__(
        self,
        method: MethodSpec,
        target_model,
        draft_model,
        tokenizer,
        image_token: str,
        target_processor=None,
        draft_processor=None,
        head=None,
    ):
        """With processors, prompts follow each model family's own layout (`PromptBuilder`);
        without, image tokens of the text are expanded to the cached features (tests). `head`:
        the trained drafter head of a method whose drafter requires one."""
        self.method = method
        self.temperature = method.temperature
        self.target = Decoder(target_model)
        self.target_ctx = ViewContext(
            tokenizer,
            self.target.embed,
            image_token,
            builder=_builder(target_model, target_processor),
        )
        self.full = FullView()
        self.drafter = None
        self.score_visual = False
        if method.is_ar:
            self.last_draft_visual = self.last_target_visual = 0
            return
        if method.needs(TRAINED_HEAD) and head is None:
            raise ValueError(
                f"method {method.method!r} drafts with a trained {method.drafter} head, "
                "and none was given"
            )
        if method.needs(DRAFT_MODEL) and draft_model is None:
            raise ValueError(f"method {method.method!r} needs a draft model")
        self.policy = method.part("tree").build()
        self.drafter = method.build_drafter(
            target=self.target,
            draft=draft_model,
            head=head,
            temperature=drafting_temperature(self.policy, self.temperature),
        )
        self.rule = method.part("acceptance").build()
        self.views = None  # a head reads the target's own prompt and features
        # views built from the target's prefill (S) and DREAM's visual token compression rank
        # visual tokens by the target's text-to-visual attention there
        self.score_visual = method.needs(TARGET_ATTENTION)
        if method.parts_of("view"):  # a draft model over views of the prompt
            decoder = self.drafter.decoder
            self.views = [view.build() for view in method.parts_of("view")]
            pooled = "P" in method.views
            project = projector_of(draft_model) if pooled else None
            builder = _builder(draft_model, draft_processor)
            if pooled and builder is not None and not builder.family.pooled_view:
                raise ValueError(
                    f"view P (2x2 pooling of one crop's patch grid before the projector) is not "
                    f"defined for {type(draft_model).__name__} (family {builder.family.name}); "
                    "it is defined for the LLaVA-1.5 layout (llava)"
                )
            target_builder = self.target_ctx.builder
            render = target_builder.render if builder is None and target_builder else None
            self.draft_ctx = ViewContext(
                tokenizer, decoder.embed, image_token, project, builder, render
            )
        self.last_draft_visual = 0
        self.last_target_visual = 0

    def target_prompt(self, sample: Sample) -> Prompt:
        if sample.target is None:
            sample.target = self.full.build(sample.text, sample.target_images, self.target_ctx)
        self.last_target_visual = sample.target.n_visual
        return sample.target

    def draft_prompts(
        self, sample: Sample, attention: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The sample in each of the drafter's views (one cache row each); `attention` is the
        target prefill's score of each visual token, split here over the images (view S)."""
        if self.views is None:  # a head on the target's features reads the target's prompt
            prompt = self.target_prompt(sample)
            self.last_draft_visual = prompt.n_visual
            return HeadPrompts(prompt, attention)
        images = sample.draft_images
        if attention is not None:
            sizes = [i.embeds.shape[0] for i in sample.target_images]
            parts = torch.split(attention, sizes)
            images = [replace(i, attention=a) for i, a in zip(images, parts, strict=True)]
        prompts = [v.build(sample.text, images, self.draft_ctx) for v in self.views]
        # visual tokens the draft reads: summed over its views (an ensemble pays for each row)
        self.last_draft_visual = sum(p.n_visual for p in prompts)
        return prompts

    def speculative_inputs(self, sample: Sample):
        """(target prompt, the draft prompts' builder, the visual positions to score at prefill
        or None): what a speculative generation of `sample` starts from."""
        prompt = self.target_prompt(sample)
        scored = self.score_visual and prompt.n_visual > 0
        return (
            prompt,
            lambda attention: self.draft_prompts(sample, attention),
            prompt.visual if scored else None,
        )

    def decode(self, sample: Sample, max_new: int, stop: set[int], sampler) -> Generation:
        """Decode one sample with this method."""
        if self.drafter is None:
            self.last_draft_visual = 0
            return self.decode_ar(sample, max_new, stop, sampler)
        prompt, draft_prompts, score_visual = self.speculative_inputs(sample)
        return decode_speculative(
            self.target,
            prompt,
            self.drafter,
            draft_prompts,
            self.policy,
            self.rule,
            max_new,
            stop,
            self.temperature,
            sampler,
            score_visual=score_visual,
            tokenizer=self.target_ctx.tokenizer,
        )

    def decode_ar(self, sample: Sample, max_new: int, stop: set[int], sampler) -> Generation:
        """AR on the same target and sample (the timing reference of a method's speedup)."""
        prompt = self.target_prompt(sample)
        return decode_ar(self.target, prompt, max_new, stop, self.temperature, sampler)

    def probe_ar(self, sample: Sample, first_token: int, steps: int, sampler) -> Generation:
        """AR's first `steps` steps of the sample, just after this runner decoded it (the
        target's cache still holds its prompt: `loops.probe_ar`)."""
        prompt = self.target_prompt(sample)
        return probe_ar(self.target, len(prompt), first_token, steps, self.temperature, sampler)

    def argmax_misses(self, sample: Sample, tokens: list[int]) -> list:
        """Where the target, fed `tokens` one at a time as AR decodes, would not have emitted
        them (`loops.argmax_misses`)."""
        return argmax_misses(self.target, self.target_prompt(sample), tokens)
