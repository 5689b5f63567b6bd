"""Views: what a model sees of the prompt, as input embeddings built from cached image data.

The target always sees the full view M. A drafter sees one or more views (an ensemble batches
them). No view runs a vision tower: every view derives from the visual cache (projector output
and pre-projector features) or, for C, from the caption cache.

Views are named by letters, as in TABED: `M` full, `T` text only, `C` caption, `P` 2x2-pooled,
`U` uniform pruning (keep ratio from the method's `keep`). A view string such as "MTCP" names an
ensemble of those views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CAPTION_PREFIX = "image: "  # TABED appendix I.2


@dataclass
class ImageInput:
    """One image as cached for one model: projector output, features before it, a caption."""

    embeds: torch.Tensor  # [N, H]
    features: torch.Tensor | None = None  # [N, D] (pooled views)
    caption: str | None = None  # (caption view)


@dataclass
class Prompt:
    """A prompt as one model sees it: embeddings [L, H] and how many of them are visual."""

    embeds: torch.Tensor
    n_visual: int


@dataclass
class ViewContext:
    """What building a view needs from the model that will read it."""

    tokenizer: object
    embed: torch.nn.Module  # the model's input embedding
    image_token: str
    project: object = None  # features [N, D] -> embeds [N, H] (the model's projector)


def embed_with_images(text: str, images: list[torch.Tensor], ctx: ViewContext) -> Prompt:
    """Expand each image token to its embeddings' length, embed, and splice the embeddings in."""
    pieces = text.split(ctx.image_token)
    if len(pieces) - 1 != len(images):
        raise ValueError(
            f"prompt has {len(pieces) - 1} {ctx.image_token} placeholders but {len(images)} images"
        )
    expanded = pieces[0]
    for piece, feats in zip(pieces[1:], images, strict=True):
        expanded += ctx.image_token * feats.shape[0] + piece
    ids = ctx.tokenizer(expanded, return_tensors="pt").input_ids[0].to(ctx.embed.weight.device)
    embeds = ctx.embed(ids)
    if images:
        image_id = ctx.tokenizer.convert_tokens_to_ids(ctx.image_token)
        slots = ids == image_id
        feats = torch.cat(images).to(embeds.device, embeds.dtype)
        if int(slots.sum()) != feats.shape[0]:
            raise ValueError("image token count after tokenisation does not match the features")
        embeds = embeds.clone()
        embeds[slots] = feats
    return Prompt(embeds, sum(f.shape[0] for f in images))


def _replace_images(text: str, ctx: ViewContext, replacements: list[str]) -> str:
    pieces = text.split(ctx.image_token)
    if len(pieces) - 1 != len(replacements):
        raise ValueError(
            f"prompt has {len(pieces) - 1} {ctx.image_token} placeholders "
            f"but {len(replacements)} images"
        )
    out = pieces[0]
    for piece, replacement in zip(pieces[1:], replacements, strict=True):
        out += replacement + piece
    return out


class FullView:
    """M: every image as its full sequence of visual tokens."""

    name = "M"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        return embed_with_images(text, [i.embeds for i in images], ctx)


class TextOnlyView:
    """T: text only; each image placeholder becomes "\\n" and no pixels are seen (TABED)."""

    name = "T"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        return embed_with_images(_replace_images(text, ctx, ["\n"] * len(images)), [], ctx)


class CaptionView:
    """C: each image becomes "image: " + its cached caption (TABED caption drafting)."""

    name = "C"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        missing = [k for k, image in enumerate(images) if image.caption is None]
        if missing:
            raise ValueError(f"view C needs captions; images {missing} of the prompt have none")
        captions = [CAPTION_PREFIX + image.caption for image in images]
        return embed_with_images(_replace_images(text, ctx, captions), [], ctx)


def pool_2x2(features: torch.Tensor) -> torch.Tensor:
    """Average-pool a square grid of patch features [N, D] with a 2x2 kernel -> [N/4, D]."""
    n, dim = features.shape
    side = math.isqrt(n)
    if side * side != n or side % 2:
        raise ValueError(f"view P needs a square, even-sided patch grid; got {n} tokens")
    grid = features.T.reshape(1, dim, side, side)
    pooled = torch.nn.functional.avg_pool2d(grid.float(), 2).to(features.dtype)
    return pooled.reshape(dim, -1).T


class PooledView:
    """P: vision features 2x2 average-pooled, then projected (576 -> 144 tokens on LLaVA-1.5)."""

    name = "P"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        if ctx.project is None:
            raise ValueError("view P needs the draft model's projector")
        if any(image.features is None for image in images):
            raise ValueError("view P needs cached vision features (the visual cache's `features`)")
        with torch.inference_mode():
            pooled = [ctx.project(pool_2x2(image.features)) for image in images]
        return embed_with_images(text, pooled, ctx)


def uniform_keep(n: int, keep: float) -> torch.Tensor:
    """Indices of max(1, round(keep * n)) tokens spread evenly over 0..n-1."""
    k = max(1, min(n, round(keep * n)))
    return torch.linspace(0, n - 1, k).round().long()


class UniformView:
    """U(keep): a uniformly spaced share `keep` of each image's visual tokens."""

    name = "U"

    def __init__(self, keep: float):
        if not 0 < keep <= 1:
            raise ValueError(f"view U needs 0 < keep <= 1, got {keep}")
        self.keep = keep

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        kept = [i.embeds[uniform_keep(i.embeds.shape[0], self.keep)] for i in images]
        return embed_with_images(text, kept, ctx)


VIEWS = {"M": FullView, "T": TextOnlyView, "C": CaptionView, "P": PooledView, "U": UniformView}
IMAGE_VIEWS = {"M", "P", "U"}  # views that read the draft model's visual cache


def parse_views(views: str) -> list[str]:
    """ "MTCP" -> ["M", "T", "C", "P"]; each letter a known view, none twice."""
    letters = list(views)
    unknown = [v for v in letters if v not in VIEWS]
    if not letters or unknown:
        raise ValueError(f"views {views!r}: each letter must be one of {''.join(VIEWS)}")
    if len(set(letters)) != len(letters):
        raise ValueError(f"views {views!r} names a view twice")
    return letters


def make_view(name: str, keep: float = 0.5):
    if name not in VIEWS:
        raise ValueError(f"unknown view {name!r}; known: {sorted(VIEWS)}")
    return UniformView(keep) if name == "U" else VIEWS[name]()
