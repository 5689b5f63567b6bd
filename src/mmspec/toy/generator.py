"""A trained toy image generator's folder (`toy.imagegen`) as an image-generation cell reads it:
the toy model source's reader for image generation (`toy.model_source`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mmspec.decoding.decoder import Decoder
from mmspec.models import loading
from mmspec.models.image_generation import ImageGenerator
from mmspec.toy.imagegen import META, ImageGenMeta
from mmspec.toy.vq import PatchVQ


class ToyGenerator(ImageGenerator):
    """A trained toy generator's folder as an image-generation cell reads it: codes are tokens
    `<c{i}>` of the Llama's own vocabulary, decoded to pixels by its VQ codebook."""

    def __init__(self, ref: str, path: str, device: torch.device, dtype: str):
        self.model = loading.load_model(ref, device, dtype)
        self.tokenizer = loading.tokenizer_of(loading.load_processor(ref))
        self.meta = ImageGenMeta.load(path)
        self.vq = PatchVQ.load(path)
        self.grid, self.code_range = self.meta.grid, self.meta.code_range

    def decoder(self) -> Decoder:
        return Decoder(self.model)

    def prompts(self, caption: str) -> list[list[int]]:
        return self.meta.guided_prompts(self.tokenizer, caption)

    def codebook(self) -> tuple[torch.Tensor, int]:
        return self.vq.codebook, self.meta.code_offset

    def _pixels(self, codes: torch.Tensor) -> np.ndarray:
        return self.vq.decode(codes)

    @property
    def vocab(self) -> int:
        return self.model.get_output_embeddings().out_features


def read(ref: str, path: str, device: torch.device, dtype: str) -> ToyGenerator | None:
    """A toy generator's folder as an image-generation cell reads it; None for another folder
    (the reader `toy.model_source` names)."""
    return ToyGenerator(ref, path, device, dtype) if (Path(path) / META).exists() else None
