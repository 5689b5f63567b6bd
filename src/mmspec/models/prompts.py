"""Chat text and cached image and video features -> a model's `Prompt`, by the family's code.

The family's processor lays the prompt out (placeholder expansion, tiles, image markers, its
position extras such as Qwen's `image_grid_thw` and `mm_token_type_ids`); the family's own
multimodal forward merges the cached features into the embeddings and computes its positions
(M-RoPE via `get_rope_index`), given the features as `mm_encoder_outputs` so that no vision
tower runs. Its language model is not run: a hook takes its inputs (embeddings, position ids)
and stops the forward there; mmspec's decoder runs the language model with its own cache.
"""

from __future__ import annotations

import inspect

import torch

from mmspec.data import media
from mmspec.decoding.prompt import Prompt, image_blocks
from mmspec.models import families
from mmspec.models.loading import tokenizer_of


class _Captured(Exception):
    """Raised by the hook with the language model's inputs, to stop the forward there."""

    def __init__(self, inputs: dict):
        super().__init__("captured")
        self.inputs = inputs


def _features_output(features: list[torch.Tensor], as_tensor: bool):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    pooled = torch.cat(features) if as_tensor else tuple(features)
    return BaseModelOutputWithPooling(pooler_output=pooled)


def _video_output(features: list[torch.Tensor], form: str):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    if form == "one_batch":
        return BaseModelOutputWithPooling(pooler_output=torch.cat(features)[None])
    return BaseModelOutputWithPooling(pooler_output=tuple(features))


class PromptBuilder:
    """Builds prompts for one model from its processor and its cached image features."""

    def __init__(self, model, processor):
        from mmspec.decoding.decoder import language_parts

        self.model = model
        self.family = families.family_of(model)
        self.processor = processor
        self.tokenizer = tokenizer_of(processor)
        self.inner = model.model
        self.stack, _, self.embed = language_parts(model)
        self.visual_ids = torch.tensor(families.visual_token_ids(model.config), dtype=torch.long)
        accepted = set(inspect.signature(self.inner.forward).parameters)
        # processor outputs the forward needs besides the features (positions, masks)
        self.extras = accepted - {
            "input_ids",
            "attention_mask",
            "pixel_values",
            "pixel_values_videos",
            "inputs_embeds",
        }

    def render(self, messages: list[dict]) -> str:
        if self.family.video is None:  # this family reads a video as its frames
            messages = media.frames_as_images(messages)
        return self.processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )

    @torch.inference_mode()
    def build(self, text: str, visuals: list, features: list[torch.Tensor]) -> Prompt:
        """The prompt of `text` (rendered chat) with `visuals` (in order, a PIL image or a
        video as a list of PIL frames) whose cached features (one [n_i, H] each) replace their
        placeholders."""
        if len(visuals) != len(features):
            raise ValueError(f"{len(visuals)} images or videos but {len(features)} cached")
        is_video = [isinstance(v, list) for v in visuals]
        media_inputs = {
            "images": [v for v, video in zip(visuals, is_video, strict=True) if not video],
            "videos": [v for v, video in zip(visuals, is_video, strict=True) if video],
        }
        media_inputs = {k: v for k, v in media_inputs.items() if v}
        if media_inputs:
            inputs = self.processor(text=[text], **media_inputs, return_tensors="pt")
        else:
            inputs = self.tokenizer([text], return_tensors="pt")
        ids = inputs["input_ids"].to(self.model.device)
        visual = torch.isin(ids[0].cpu(), self.visual_ids)
        n_features = sum(f.shape[0] for f in features)
        if int(visual.sum()) != n_features:
            raise ValueError(
                f"{type(self.model).__name__}: the processor laid out {int(visual.sum())} visual "
                f"tokens for {len(visuals)} images or videos but the visual cache holds "
                f"{n_features} (was the cache built by this model?)"
            )
        kwargs = {k: v.to(self.model.device) for k, v in inputs.items() if k in self.extras}
        dtype = self.embed.weight.dtype
        moved = [f.to(self.model.device, dtype) for f in features]
        images = [f for f, video in zip(moved, is_video, strict=True) if not video]
        videos = [f for f, video in zip(moved, is_video, strict=True) if video]
        outputs = {}
        if images:
            outputs["image"] = _features_output(images, self.family.features_as_tensor)
        if videos:
            outputs["video"] = _video_output(videos, self.family.video)
        if outputs:
            kwargs["mm_encoder_outputs"] = outputs
        captured = self._language_inputs(ids, kwargs)
        embeds = captured["inputs_embeds"][0]
        positions = captured.get("position_ids")
        if self.family.multi_axis_positions and positions is not None:
            positions = positions[-3:, 0].cpu()  # [3, L] (a leading text axis is dropped)
        else:
            positions = None
        blocks = image_blocks(visual) if self.family.bidirectional_images else None
        if embeds.shape[0] != ids.shape[1]:  # the visual mask, read off the ids, would not fit
            raise RuntimeError(
                f"{type(self.model).__name__}: {ids.shape[1]} token ids gave {embeds.shape[0]} "
                "input embeddings; a prompt keeps one id per position"
            )
        return Prompt(embeds, visual, positions, blocks, ids[0].cpu())

    def _language_inputs(self, ids: torch.Tensor, kwargs: dict) -> dict:
        def hook(module, args, inputs):
            raise _Captured(inputs)

        handle = self.stack.register_forward_pre_hook(hook, with_kwargs=True)
        state = getattr(self.inner, "rope_deltas", None)
        try:
            if hasattr(self.inner, "rope_deltas"):
                self.inner.rope_deltas = None  # recomputed from this prompt, not a stale one
            self.inner(input_ids=ids, use_cache=False, **kwargs)
        except _Captured as captured:
            return captured.inputs
        finally:
            handle.remove()
            if hasattr(self.inner, "rope_deltas"):
                self.inner.rope_deltas = state
        raise RuntimeError(f"{type(self.inner).__name__} never called its language model")
