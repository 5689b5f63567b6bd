"""The toy world's tokenizer and processor, built locally (word level, no download).

They are ordinary `PreTrainedTokenizerFast` / `LlavaProcessor` objects saved with
`save_pretrained`, so toy models load exactly like hub models.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import CLIPImageProcessorPil, LlavaProcessor, PreTrainedTokenizerFast

from mmspec.toy import world as toyworld

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 16 per image
SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>", "<image>", "\n"]
MEAN = [0.5, 0.5, 0.5]
STD = [0.5, 0.5, 0.5]

# Rendered as "<bos> user : <image> describe the image . assistant : answer <eos> user : ...".
CHAT_TEMPLATE = (
    "{{ '<bos>' }}{% for message in messages %}{{ ' ' + message['role'] + ' :' }}"
    "{% if message['content'] is string %}{{ ' ' + message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ ' <image>' }}"
    "{% else %}{{ ' ' + item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ ' <eos>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ ' assistant :' }}{% endif %}"
)


def word_level_tokenizer(
    specials: list[str], extra: dict, added: list[str], template: str
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: `specials` (pad, unk, bos, eos first) then the toy vocabulary;
    `extra` names the processor's special tokens, `added` are split out as special tokens."""
    words = sorted(set(toyworld.VOCABULARY) - set(specials))
    vocab = {token: i for i, token in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # splits \w+|[^\w\s]+, so "image: a red circle" (the caption view) gives "image" ":" ...
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=extra,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": added})
    tokenizer.chat_template = template
    return tokenizer


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the toy vocabulary; `<image>` and `\\n` are special tokens."""
    return word_level_tokenizer(SPECIALS, {"image_token": "<image>"}, ["\n"], CHAT_TEMPLATE)


def image_processor() -> CLIPImageProcessorPil:
    """Images resized to 32x32 (the toy world's own are that size already: unchanged), scaled
    to [-1, 1] (the toy models' image processor; a dataset of your own runs on toy pairs as a
    real model's processor would resize it)."""
    return CLIPImageProcessorPil(
        do_resize=True,
        do_center_crop=False,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=MEAN,
        image_std=STD,
        do_convert_rgb=True,
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )


def build_processor() -> LlavaProcessor:
    """A LlavaProcessor for 32x32 images: 16 image tokens per image (CLS dropped)."""
    return LlavaProcessor(
        image_processor=image_processor(),
        tokenizer=build_tokenizer(),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def pixel_values(images):
    """Normalise uint8 [N, 32, 32, 3] images as the processor does (fast path for training)."""
    import torch

    x = torch.as_tensor(images, dtype=torch.float32).permute(0, 3, 1, 2) / 255.0
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x - mean) / std
