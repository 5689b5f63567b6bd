"""Views: what a model sees of the prompt, as input embeddings built from cached visual features.

The target always sees the full view M. A drafter sees the view its method names. No view runs a
vision tower: image embeddings come from the visual cache (stage cache_visual).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Prompt:
    """A prompt as one model sees it: embeddings [L, H] and how many of them are visual."""

    embeds: torch.Tensor
    n_visual: int


def _embed_with_images(
    text: str, images: list[torch.Tensor], tokenizer, embed, image_token: str
) -> Prompt:
    """Expand each image token to its cached features' length, embed, and splice features in."""
    pieces = text.split(image_token)
    if len(pieces) - 1 != len(images):
        raise ValueError(
            f"prompt has {len(pieces) - 1} {image_token} placeholders but {len(images)} images"
        )
    expanded = pieces[0]
    for piece, feats in zip(pieces[1:], images, strict=True):
        expanded += image_token * feats.shape[0] + piece
    ids = tokenizer(expanded, return_tensors="pt").input_ids[0].to(embed.weight.device)
    embeds = embed(ids)
    if images:
        image_id = tokenizer.convert_tokens_to_ids(image_token)
        slots = ids == image_id
        feats = torch.cat(images).to(embeds.dtype)
        if int(slots.sum()) != feats.shape[0]:
            raise ValueError("image token count after tokenisation does not match the features")
        embeds = embeds.clone()
        embeds[slots] = feats
    return Prompt(embeds, sum(f.shape[0] for f in images))


class FullView:
    """M: every image as its full sequence of visual tokens."""

    name = "M"

    def build(self, text, images, tokenizer, embed, image_token) -> Prompt:
        return _embed_with_images(text, images, tokenizer, embed, image_token)


class TextOnlyView:
    """T: text only; each image placeholder becomes "\\n" and no pixels are seen (TABED)."""

    name = "T"

    def build(self, text, images, tokenizer, embed, image_token) -> Prompt:
        text = text.replace(image_token, "\n")
        return _embed_with_images(text, [], tokenizer, embed, image_token)


VIEWS = {"M": FullView, "T": TextOnlyView}


def make_view(name: str):
    if name not in VIEWS:
        raise ValueError(f"unknown view {name!r}; known: {sorted(VIEWS)}")
    return VIEWS[name]()
