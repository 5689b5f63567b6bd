"""A captioning model behind one call: image -> caption text (view C's source).

Any HF image-text-to-text model loads through `loading`, from an HF id (Florence-2's
`<CAPTION>` task prompt) or a local directory (the toy world's captioner). A processor with a chat
template gets the prompt as a user message holding the image; otherwise the prompt is passed raw.
"""

from __future__ import annotations

import time

import torch

from mmspec.decoding.timing import sync
from mmspec.models import loading


class Captioner:
    def __init__(self, ref: str, device: torch.device, dtype: str, prompt: str, max_new: int):
        self.ref, self.prompt, self.max_new = ref, prompt, max_new
        self.device = device
        self.processor = loading.load_processor(ref)
        self.model = loading.load_model(ref, device, dtype, check_family=False)
        if getattr(self.processor, "image_processor", None) is None:
            raise ValueError(f"captioner {ref}: its processor has no image processor")
        if getattr(self.processor, "chat_template", None):
            message = {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": prompt}],
            }
            self.text = self.processor.apply_chat_template(
                [message], add_generation_prompt=True, tokenize=False
            )
        else:
            self.text = prompt

    @torch.inference_mode()
    def caption(self, image) -> tuple[str, float]:
        """(caption, seconds) for one PIL image, greedy decoding."""
        sync(self.device)
        start = time.perf_counter()
        inputs = self.processor(images=image, text=self.text, return_tensors="pt").to(self.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        out = self.model.generate(**inputs, max_new_tokens=self.max_new, do_sample=False)
        prompt_ids = inputs["input_ids"]
        n = prompt_ids.shape[1]
        # decoder-only models return the prompt too; encoder-decoders (Florence-2) only new ids
        if out.shape[1] >= n and torch.equal(out[0, :n], prompt_ids[0]):
            out = out[:, n:]
        text = self.processor.batch_decode(out, skip_special_tokens=True)[0].strip()
        sync(self.device)
        return text, time.perf_counter() - start
