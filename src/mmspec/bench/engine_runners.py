"""The engine benchmark's four runners over one target and draft (`mmspec.bench.engine`).

  ours_ar      mmspec `decode_ar` over a `Decoder` of the target
  hf_generate  `target.generate(do_sample=False)`
  ours_sd      mmspec `decode_speculative`: `ModelDrafter` (draft, view M), chain(gamma), greedy
  hf_assisted  `target.generate(assistant_model=draft)`, gamma draft tokens per step, constant

Pitfall (transformers 5.23): HF assisted generation with a Llava assistant silently drops the
draft's image. The target pre-encodes the pixels into `mm_encoder_outputs` and pops
`pixel_values`; the assistant's inner `generate` runs with `is_first_iteration=False`, so the
draft never runs its vision tower and sees bare `<image>` token embeddings (no error, a weaker
draft: with the target as its own draft, 1.1 instead of 6 tokens per target forward). Workaround:
a forward pre-hook on the draft's LlavaModel passes it the sample's pixel_values while its cache is
empty (the prompt prefill). `check_assistant_view` asserts that the draft's prompt embeddings then
equal our draft's view M, so both sides draft from the same input.
"""

from __future__ import annotations

import io
import json

import torch
from PIL import Image

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.trees import ChainPolicy
from mmspec.decoding.views import FullView, ImageInput, ViewContext
from mmspec.models import loading, visual
from mmspec.stages.generate import stop_tokens

RUNNERS = ["ours_ar", "hf_generate", "ours_sd", "hf_assisted"]


class BenchError(Exception):
    """The benchmark cannot run as asked (missing inputs, no samples, an unfair comparison)."""


class Runners:
    """The target and draft loaded once; each runner decodes one prepared sample greedily."""

    def __init__(self, target: str, draft: str, gamma: int, max_new_tokens: int, device):
        self.device, self.max_new = device, max_new_tokens
        self.processor = loading.load_processor(target)
        self.tokenizer = loading.tokenizer_of(self.processor)
        self.image_token = loading.image_token_of(self.processor)
        self.target = loading.load_model(target, device)
        self.draft = loading.load_model(draft, device)
        self.stop = stop_tokens(self.target, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.hf_kwargs = dict(do_sample=False, max_new_tokens=self.max_new, pad_token_id=pad)
        self.hf_kwargs["eos_token_id"] = sorted(self.stop)
        config = self.draft.generation_config
        config.num_assistant_tokens = gamma
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        self.t_dec, self.view, self.policy = Decoder(self.target), FullView(), ChainPolicy(gamma)
        self.drafter = ModelDrafter(Decoder(self.draft), temperature=0.0)
        self.hf_target_forwards = 0

    def sample(self, row: dict) -> dict:
        """A prepared row through the processor, once and untimed: every runner starts here."""
        chat = self.processor.apply_chat_template
        text = chat(json.loads(row["messages"]), add_generation_prompt=True, tokenize=False)
        images = [Image.open(io.BytesIO(png)).convert("RGB") for png in row["images"]]
        inputs = self.processor(images=images or None, text=text, return_tensors="pt")
        return {"text": text, "inputs": inputs.to(self.device)}

    def prompt(self, model, decoder: Decoder, s: dict) -> torch.Tensor:
        """Pixels -> this model's image embeddings -> view M prompt embeddings."""
        pixels = s["inputs"].get("pixel_values")
        images = list(visual.encode_images(model, pixels)[1]) if pixels is not None else []
        ctx = ViewContext(self.tokenizer, decoder.embed, self.image_token)
        prompt = self.view.build(s["text"], [ImageInput(e) for e in images], ctx)
        return prompt.embeds

    def ours_ar(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        return decode_ar(self.t_dec, prompt, self.max_new, self.stop, 0.0, None)

    def ours_sd(self, s):
        prompt = self.prompt(self.target, self.t_dec, s)
        draft_prompt = self.prompt(self.draft, self.drafter.decoder, s)
        rest = (self.policy, accept_greedy, self.max_new, self.stop, 0.0, None)
        return decode_speculative(self.t_dec, prompt, self.drafter, [draft_prompt], *rest)

    def hf_generate(self, s, **extra):
        out = self.target.generate(**s["inputs"], **self.hf_kwargs, **extra)
        return out[0, s["inputs"]["input_ids"].shape[1] :].tolist()

    def hf_assisted(self, s, spy=None):
        pixels = s["inputs"].get("pixel_values")

        def feed_pixels(module, args, kwargs):  # the workaround (module docstring)
            cache = kwargs.get("past_key_values")
            if pixels is not None and (cache is None or cache.get_seq_length() == 0):
                kwargs.update(pixel_values=pixels, mm_encoder_outputs=None)
            return args, kwargs

        def count(module, args, kwargs):
            self.hf_target_forwards += 1

        hooks = [(self.draft.model, feed_pixels), (self.target.model.language_model, count)]
        hooks += [(self.draft.model.language_model, spy)] if spy else []
        handles = [m.register_forward_pre_hook(f, with_kwargs=True) for m, f in hooks]
        try:
            return self.hf_generate(s, assistant_model=self.draft)
        finally:
            for handle in handles:
                handle.remove()

    def check_assistant_view(self, s) -> None:
        """The HF assistant's prompt embeddings must equal our draft's view M (image included)."""
        seen = []
        self.hf_assisted(s, spy=lambda m, a, k: seen.append(k["inputs_embeds"][0].clone()))
        ours = self.prompt(self.draft, self.drafter.decoder, s)
        if seen[0].shape != ours.shape or not torch.allclose(seen[0], ours, atol=1e-5):
            raise BenchError(
                "the HF assistant does not draft from the same prompt as ours "
                "(mmspec.bench.engine_runners)"
            )
