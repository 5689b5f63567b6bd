"""A randomly initialised Llava of a given size: a small CLIP vision tower and a Llama decoder
over a tokenizer's vocabulary (the toy world's architecture, and the models `mmspec
verify-lossless` proves methods on)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration


class Size(NamedTuple):
    """A model's size: its decoder's width, layers and attention heads, and the width of its
    vision tower (None: a decoder alone)."""

    hidden: int
    layers: int
    heads: int
    vision_hidden: int | None = None


def llama_config(size: Size, tokenizer, max_positions: int = 512) -> LlamaConfig:
    """A Llama decoder of `size` over `tokenizer`'s vocabulary."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=2 * size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def build(
    tokenizer, seed: int, image_size: int, patch_size: int, size: Size
) -> LlavaForConditionalGeneration:
    """A Llava of `size`, drawn from `seed`, reading images of `image_size` pixels in patches of
    `patch_size` (one image token per patch)."""
    torch.manual_seed(seed)
    width = size.vision_hidden
    vision = CLIPVisionConfig(
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image_size,
        patch_size=patch_size,
        num_channels=3,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=llama_config(size, tokenizer),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(image_size // patch_size) ** 2,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return LlavaForConditionalGeneration(config)
