"""Views: what a model sees of the prompt, as input embeddings built from cached image data.

The target always sees the full view M. A drafter sees one or more views (an ensemble batches
them). No view runs a vision tower: every view derives from the visual cache (projector output
and pre-projector features) or, for C, from the caption cache.

Views are named by letters, as in TABED: `M` full, `T` text only, `C` caption, `P` 2x2-pooled,
`U` uniform pruning (keep ratio from the method's `keep`), `S` SpecVLM's verifier-guided pruning
(from the target's own attention at prefill; `drop`, `mass`). A view string such as "MTCP" names
an ensemble of those views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mmspec.data import media
from mmspec.decoding import catalog
from mmspec.decoding.component import (
    CAPTIONS,
    DRAFT_VISUAL,
    NUMBER,
    TARGET_ATTENTION,
    Param,
    View,
)
from mmspec.decoding.lazy import torch
from mmspec.decoding.prompt import Prompt

CAPTION_PREFIX = "image: "  # TABED appendix I.2


@dataclass
class ImageInput:
    """One image (or one video, for a family that reads videos as videos) as cached for one
    model: projector output, features before it, a caption (one per frame of a video)."""

    embeds: torch.Tensor  # [N, H]
    features: torch.Tensor | None = None  # [N, D] (pooled views)
    caption: str | list[str] | None = None  # (caption view)
    # the attention each of its tokens received in the target's prefill of the current prompt
    attention: torch.Tensor | None = None  # [N] (view S)
    image: object = None  # the PIL image (the family's processor lays out its placeholders)
    frames: list | None = None  # a video's frames (PIL), instead of `image`

    @property
    def pixels(self):
        """What the family's processor takes: the image, or the video's frames."""
        return self.frames if self.frames is not None else self.image

    def as_text(self, text: str) -> str:
        """`text` in place of the image, once per frame of a video."""
        return text * (len(self.frames) if self.frames is not None else 1)


class Chat(str):
    """A rendered chat prompt that keeps its messages, so that text-only views can render it
    again with each image item replaced by text, whatever image markers the family uses."""

    messages: list | None

    def __new__(cls, text: str, messages: list | None = None):
        chat = super().__new__(cls, text)
        chat.messages = messages
        return chat


@dataclass
class ViewContext:
    """What building a view needs from the model that will read it.

    With a `builder` (`models.prompts.PromptBuilder`: the family's processor and multimodal
    forward) prompts follow the family's own layout and positions; without one (tests with
    synthetic features) each image token of the text is expanded to its features' length.
    """

    tokenizer: object  # the reading model's tokenizer
    embed: torch.nn.Module  # the model's input embedding
    image_token: str  # the text's image placeholder ("<image>")
    project: object = None  # features [N, D] -> embeds [N, H] (the model's projector)
    builder: object = None  # the family's prompt builder, or None
    # a model with no builder (a text-only draft): the target's chat renderer, for prompts
    # whose video placeholders are not image tokens
    render: object = None


def full_prompt(text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
    """View M of the prompt: every image as all of its cached visual tokens."""
    if ctx.builder is not None:
        messages = getattr(text, "messages", None)
        if messages is not None:  # in the model's own chat template
            text = ctx.builder.render(messages)
        return ctx.builder.build(text, [i.pixels for i in images], [i.embeds for i in images])
    return embed_with_images(text, [i.embeds for i in images], ctx)


def image_spans(prompt: Prompt, sizes: list[int]) -> list[torch.Tensor]:
    """The positions of each image's visual tokens in a full prompt, in order."""
    positions = torch.nonzero(prompt.visual).flatten()
    if len(positions) != sum(sizes):
        raise ValueError(f"the prompt has {len(positions)} visual tokens, the images {sum(sizes)}")
    return list(torch.split(positions, sizes))


def keep_visual(text: str, images: list[ImageInput], kept: list[torch.Tensor], ctx) -> Prompt:
    """The full prompt with only the visual tokens `kept[i]` (indices) of each image i."""
    if ctx.builder is None:
        return embed_with_images(
            text, [i.embeds[k] for i, k in zip(images, kept, strict=True)], ctx
        )
    prompt = full_prompt(text, images, ctx)
    mask = ~prompt.visual.clone()
    spans = image_spans(prompt, [i.embeds.shape[0] for i in images])
    for span, k in zip(spans, kept, strict=True):
        mask[span[k.to(span.device)]] = True
    return prompt.keep(mask)


def embed_with_images(text: str, images: list[torch.Tensor], ctx: ViewContext) -> Prompt:
    """Expand each image token to its embeddings' length, embed, and splice the embeddings in
    (the path without a family builder, or with no images through one)."""
    if ctx.builder is not None:
        if images:
            raise ValueError("a family builder lays out images itself; use full_prompt")
        return ctx.builder.build(text, [], [])
    pieces = text.split(ctx.image_token)
    if len(pieces) - 1 != len(images):
        raise ValueError(
            f"prompt has {len(pieces) - 1} {ctx.image_token} placeholders but {len(images)} images"
        )
    expanded = pieces[0]
    for piece, feats in zip(pieces[1:], images, strict=True):
        expanded += ctx.image_token * feats.shape[0] + piece
    ids = ctx.tokenizer(expanded, return_tensors="pt").input_ids[0]
    embeds = ctx.embed(ids.to(ctx.embed.weight.device))
    slots = ids == ctx.tokenizer.convert_tokens_to_ids(ctx.image_token)
    if images:
        feats = torch.cat(images).to(embeds.device, embeds.dtype)
        if int(slots.sum()) != feats.shape[0]:
            raise ValueError("image token count after tokenisation does not match the features")
        embeds = embeds.clone()
        embeds[slots.to(embeds.device)] = feats
    return Prompt(embeds, slots, ids=ids)


def _replace_images(text: str, ctx: ViewContext, replacements: list[str]) -> str:
    """The prompt text with each image (or video) replaced by its replacement text."""
    messages = getattr(text, "messages", None)
    if ctx.builder is not None and messages is not None:
        if ctx.builder.family.video is None:  # the builder's images are a video's frames
            messages = media.frames_as_images(messages)
        return ctx.builder.render(_text_items(messages, replacements))
    if ctx.render is not None and messages is not None and media.has_video(messages):
        # a text-only model reads a video as its frames; the target's text may mark it with a
        # video token, so render the chat again rather than splitting it at image tokens
        return ctx.render(_text_items(media.frames_as_images(messages), replacements))
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


def _text_items(messages: list[dict], replacements: list[str]) -> list[dict]:
    """The messages with their image and video items, in order, replaced by text items."""
    images = iter(replacements)
    out = []
    for message in messages:
        content = message["content"]
        if not isinstance(content, str):
            content = [
                {"type": "text", "text": next(images)}
                if item.get("type") in (media.IMAGE, media.VIDEO)
                else item
                for item in content
            ]
        out.append({**message, "content": content})
    if next(images, None) is not None:
        raise ValueError("more image replacements than image items in the messages")
    return out


@catalog.register
class FullView(View):
    """M: every image as its full sequence of visual tokens."""

    name = "M"
    requires = frozenset({DRAFT_VISUAL})
    description = "full visual tokens"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        return full_prompt(text, images, ctx)


@catalog.register
class TextOnlyView(View):
    """T: text only; each image placeholder becomes "\\n" and no pixels are seen (TABED)."""

    name = "T"
    description = "text only"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        return embed_with_images(
            _replace_images(text, ctx, [i.as_text("\n") for i in images]), [], ctx
        )


@catalog.register
class CaptionView(View):
    """C: each image becomes "image: " + its cached caption (TABED caption drafting)."""

    name = "C"
    requires = frozenset({CAPTIONS})
    description = "captions in place of images"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        missing = [k for k, image in enumerate(images) if image.caption is None]
        if missing:
            raise ValueError(f"view C needs captions; images {missing} of the prompt have none")
        captions = [
            "".join(CAPTION_PREFIX + c for c in i.caption)
            if isinstance(i.caption, list)
            else CAPTION_PREFIX + i.caption
            for i in images
        ]
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


@catalog.register
class PooledView(View):
    """P: vision features 2x2 average-pooled, then projected (576 -> 144 tokens on LLaVA-1.5)."""

    name = "P"
    requires = frozenset({DRAFT_VISUAL})
    description = "2x2-pooled visual tokens"

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        if ctx.project is None:
            raise ValueError("view P needs the draft model's projector")
        if any(image.features is None for image in images):
            raise ValueError("view P needs cached vision features (the visual cache's `features`)")
        with torch.inference_mode():
            pooled = [ctx.project(pool_2x2(image.features)) for image in images]
        if ctx.builder is None:
            return embed_with_images(text, pooled, ctx)
        if ctx.builder.family.multi_axis_positions or ctx.builder.family.bidirectional_images:
            raise ValueError(f"view P is not defined for {ctx.builder.family.name}")
        return _splice(full_prompt(text, images, ctx), [i.embeds.shape[0] for i in images], pooled)


def uniform_keep(n: int, keep: float) -> torch.Tensor:
    """Indices of max(1, round(keep * n)) tokens spread evenly over 0..n-1."""
    k = max(1, min(n, round(keep * n)))
    return torch.linspace(0, n - 1, k).round().long()


@catalog.register
class UniformView(View):
    """U(keep): a uniformly spaced share `keep` of each image's visual tokens."""

    name = "U"
    params = (
        Param("keep", NUMBER, 0.5, "share of visual tokens kept", low=0, high=1, low_open=True),
    )
    requires = frozenset({DRAFT_VISUAL})
    description = "uniform pruning of visual tokens"

    def __init__(self, keep: float = 0.5):
        if not 0 < keep <= 1:
            raise ValueError(f"view U needs 0 < keep <= 1, got {keep}")
        self.keep = keep

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        kept = [uniform_keep(i.embeds.shape[0], self.keep) for i in images]
        return keep_visual(text, images, kept, ctx)


def verifier_guided_keep(scores: torch.Tensor, drop: float, mass: float) -> torch.Tensor:
    """SpecVLM's kept indices (sorted) of N visual tokens scored by the target's attention.

    As its release does (`utils/utils.py`: `drop_visual_tokens_specvlm` with `percentage`, as
    `inference.py` calls it): the budget is int(N (1 - drop)) in floating point (one token fewer
    where N (1 - drop) lands just below a whole number: N = 160 at drop 0.9 keeps 15); stage I
    keeps the top-scored tokens until their running float32 sum reaches `mass` of the total (the
    crossing token included; `get_attention_token_from_percentage`), capped at the budget; stage
    II spreads the rest of the budget over the tokens not yet kept with an integer linspace
    (`torch.linspace(..., dtype=long)`, whose picks differ from a truncated float linspace's).
    Ties in score are broken by position (the release's unstable sort leaves them unspecified).
    """
    n = len(scores)
    budget = int(n * (1 - drop))
    values = scores.detach().float().cpu()
    order = torch.argsort(values, descending=True, stable=True)
    # the release adds the sorted scores one at a time in float32 (numpy's cumsum does too;
    # torch's does not round as it goes) and compares with mass times the tensor's own sum
    running = torch.from_numpy(np.cumsum(values[order].numpy(), dtype=np.float32))
    reached = int(torch.searchsorted(running, values.sum() * mass).item())
    top = order[: min(reached + 1, budget, n)]
    rest = torch.ones(n, dtype=torch.bool)
    rest[top] = False
    available = torch.nonzero(rest).flatten()
    fill = budget - len(top)
    if fill > 0:
        uniform = available[torch.linspace(0, len(available) - 1, fill, dtype=torch.long)]
    else:
        uniform = top[:0]
    return torch.sort(torch.cat([top, uniform])).values


@catalog.register
class SpecVLMView(View):
    """S(drop, mass): the visual tokens the target attended to most (SpecVLM), over all images
    of the prompt together (a video's frames share one budget)."""

    name = "S"
    params = (
        Param("drop", NUMBER, 0.9, "share of visual tokens dropped", low=0, high=1, high_open=True),
        Param(
            "mass",
            NUMBER,
            0.4,
            "share of the target's text-to-visual attention mass the kept tokens cover before "
            "uniform filling",
            low=0,
            high=1,
        ),
    )
    requires = frozenset({DRAFT_VISUAL, TARGET_ATTENTION})
    description = "SpecVLM's pruning by the target's attention"
    source = (
        "SpecVLM's release (`utils/utils.py`, `drop_visual_tokens_specvlm`; drop 0.9, "
        "percentage 0.4 in `inference.py`)"
    )

    def __init__(self, drop: float = 0.9, mass: float = 0.4):
        if not 0 <= drop < 1 or not 0 <= mass <= 1:
            raise ValueError(f"view S needs 0 <= drop < 1 and 0 <= mass <= 1; got {drop}, {mass}")
        self.drop, self.mass = drop, mass

    def build(self, text: str, images: list[ImageInput], ctx: ViewContext) -> Prompt:
        if not images:
            return embed_with_images(text, [], ctx)
        for k, image in enumerate(images):
            if image.attention is None:
                raise ValueError("view S needs the target's attention scores of every image")
            if image.attention.shape[0] != image.embeds.shape[0]:
                raise ValueError(
                    f"view S: image {k} has {image.attention.shape[0]} visual tokens for the "
                    f"target but {image.embeds.shape[0]} for the draft; pruning by the target's "
                    "attention needs the same visual tokens in both models"
                )
        kept = verifier_guided_keep(torch.cat([i.attention for i in images]), self.drop, self.mass)
        chosen = torch.zeros(sum(i.embeds.shape[0] for i in images), dtype=torch.bool)
        chosen[kept] = True
        parts = torch.split(chosen, [i.embeds.shape[0] for i in images])
        return keep_visual(text, images, [torch.nonzero(p).flatten() for p in parts], ctx)


def _splice(prompt: Prompt, sizes: list[int], replacements: list[torch.Tensor]) -> Prompt:
    """A 1D-position prompt with each image's visual tokens replaced by other embeddings (their
    ids: the image's placeholder id, once per new token)."""
    spans = image_spans(prompt, sizes)
    pieces, visual, ids, start = [], [], [], 0
    for span, new in zip(spans, replacements, strict=True):
        first, last = int(span[0]), int(span[-1]) + 1
        pieces += [prompt.embeds[start:first], new.to(prompt.embeds.device, prompt.embeds.dtype)]
        visual += [prompt.visual[start:first], torch.ones(new.shape[0], dtype=torch.bool)]
        if prompt.ids is not None:
            ids += [prompt.ids[start:first], prompt.ids[first].repeat(new.shape[0])]
        start = last
    pieces.append(prompt.embeds[start:])
    visual.append(prompt.visual[start:])
    if prompt.ids is not None:
        ids.append(prompt.ids[start:])
    return Prompt(torch.cat(pieces), torch.cat(visual), ids=torch.cat(ids) if ids else None)


def parse_views(views: str) -> list[str]:
    """ "MTCP" -> ["M", "T", "C", "P"]; each letter a known view, none twice."""
    known = catalog.components("view")
    letters = list(views)
    unknown = [v for v in letters if v not in known]
    if not letters or unknown:
        raise ValueError(f"views {views!r}: each letter must be one of {''.join(known)}")
    if len(set(letters)) != len(letters):
        raise ValueError(f"views {views!r} names a view twice")
    return letters
