"""A randomly initialised Llava of a given size: a small CLIP vision tower and a Llama decoder
over a tokenizer's vocabulary (the toy world's architecture, and the models `mmspec
verify-lossless` proves methods on)."""

from __future__ import annotations

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration


def llama_config(spec: dict, tokenizer, max_positions: int = 512) -> LlamaConfig:
    """A Llama decoder of `spec`'s size (hidden, layers, heads) over `tokenizer`'s vocabulary."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden"],
        intermediate_size=2 * spec["hidden"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["heads"],
        max_position_embeddings=max_positions,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )


def build(
    spec: dict, tokenizer, seed: int, image_size: int, patch_size: int
) -> LlavaForConditionalGeneration:
    """A Llava of `spec`'s size (and `vision_hidden`), drawn from `seed`, reading images of
    `image_size` pixels in patches of `patch_size` (one image token per patch)."""
    torch.manual_seed(seed)
    width = spec["vision_hidden"]
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
        text_config=llama_config(spec, tokenizer),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        image_seq_length=(image_size // patch_size) ** 2,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    return LlavaForConditionalGeneration(config)
