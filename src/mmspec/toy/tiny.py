"""Tiny random-init models of every supported VLM family, built offline over the toy world's
vocabulary.

Each is an ordinary `save_pretrained` folder (model + processor + chat template), so it loads
through the same `from_pretrained` path as the family's real checkpoints: a stand-in for
rehearsing a cluster sweep on a laptop (`mmspec tiny-model FAMILY DIR`) and the models the
family tests run. The weights are random; only the architecture, the processor's prompt layout
and the image handling are the family's own. Processors use the PIL image backends, which need
no torchvision.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mmspec.models import processors, video_processing
from mmspec.toy import processor as toy_processor

# per family: the specials its processor and chat template use; the image marker the chat
# template emits for an image item
_MARKERS = {
    "llava": "<image>",
    "llava_next": "<image>",
    "llava_onevision": "<image>",
    "llava_next_video": "<image>",
    "qwen2_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "idefics3": "<image>",
    "smolvlm": "<image>",
    "gemma3": "<start_of_image>",
    "mistral3": "[IMG]",
}
# the video marker of the families with a video path of their own
_VIDEO_MARKERS = {
    "llava_onevision": "<video>",
    "llava_next_video": "<video>",
    "qwen2_vl": "<|vision_start|><|video_pad|><|vision_end|>",
    "qwen2_5_vl": "<|vision_start|><|video_pad|><|vision_end|>",
}
_SPECIALS = {
    "qwen2_vl": ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"],
    "idefics3": ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]
    + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)],
    "gemma3": ["<start_of_image>", "<image_soft_token>", "<end_of_image>"],
    "mistral3": ["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
}
_SPECIALS["qwen2_5_vl"] = _SPECIALS["qwen2_vl"]
_SPECIALS["smolvlm"] = _SPECIALS["idefics3"]
FAMILIES = tuple(_MARKERS)


def chat_template(marker: str, video_marker: str | None = None) -> str:
    """A minimal chat template: "<bos> user : <marker> text assistant : ..." per turn."""
    video = (
        f"{{% elif item['type'] == 'video' %}}{{{{ ' {video_marker}' }}}}" if video_marker else ""
    )
    return (
        "{{ '<bos>' }}{% for message in messages %}{{ ' ' + message['role'] + ' :' }}"
        "{% if message['content'] is string %}{{ ' ' + message['content'] }}{% else %}"
        "{% for item in message['content'] %}{% if item['type'] == 'image' %}"
        f"{{{{ ' {marker}' }}}}{video}"
        "{% else %}{{ ' ' + item['text'] }}{% endif %}{% endfor %}{% endif %}"
        "{% if message['role'] == 'assistant' %}{{ ' <eos>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ ' assistant :' }}{% endif %}"
    )


def build_tokenizer(family: str):
    """A word-level tokenizer over the toy vocabulary plus the family's special tokens."""
    specials = ["<pad>", "<unk>", "<bos>", "<eos>", "<image>", "<video>", "\n"]
    specials += [s for s in _SPECIALS.get(family, []) if s not in specials]
    extra = {"image_token": "<image>", "video_token": "<video>"}
    if family == "gemma3":
        extra = {
            "image_token": "<image_soft_token>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
        }
    if family in ("qwen2_vl", "qwen2_5_vl"):
        extra = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"}
    if family == "mistral3":
        extra = {"image_token": "[IMG]"}
    template = chat_template(_MARKERS[family], _VIDEO_MARKERS.get(family))
    return toy_processor.word_level_tokenizer(specials, extra, specials[4:], template)


def _text(cls_name: str, vocab: int, hidden: int, layers: int, **extra):
    import transformers

    return getattr(transformers, cls_name)(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        tie_word_embeddings=False,
        **extra,
    )


def _vision(cls_name: str, hidden: int, image: int = 32, patch: int = 8, **extra):
    """A one-layer vision tower config (CLIP, SigLIP) of width `hidden`."""
    import transformers

    return getattr(transformers, cls_name)(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image,
        patch_size=patch,
        **extra,
    )


def _clip(hidden: int):
    return _vision("CLIPVisionConfig", hidden, projection_dim=hidden)


def _siglip(hidden: int):
    return _vision("SiglipVisionConfig", hidden)


def _processor(name: str) -> type:
    """The family's processor class; its image-only form where torchvision is missing."""
    import transformers

    if processors.has_torchvision():
        return getattr(transformers, name)
    return processors.without_torchvision(name)


def _pil(name: str, **kwargs):
    import transformers

    return getattr(transformers, name)(**kwargs)


NORM = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
# family -> (its transformers video processor class, the tiny model's settings)
VIDEO = {
    "llava_onevision": ("LlavaOnevisionVideoProcessor", {"size": {"height": 32, "width": 32}}),
    "llava_next_video": (
        "LlavaNextVideoVideoProcessor",
        {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}},
    ),
    "qwen2_vl": (
        "Qwen2VLVideoProcessor",
        {
            "size": {"shortest_edge": 16 * 16, "longest_edge": 64 * 64},
            "patch_size": 8,
            "merge_size": 2,
            "temporal_patch_size": 2,
        },
    ),
}
VIDEO["qwen2_5_vl"] = VIDEO["qwen2_vl"]


def _video(family: str) -> dict:
    """The processor's video processor argument: the family's own class with torchvision,
    mmspec's PIL one without (no video processor for families whose videos are frames)."""
    import transformers

    if family not in VIDEO:
        return {"video_processor": None} if family == "smolvlm" else {}
    name, settings = VIDEO[family]
    if processors.has_torchvision():
        return {"video_processor": getattr(transformers, name)(**settings, **NORM)}
    return {"video_processor": video_processing.VideoProcessor(family, **settings, **NORM)}


PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]


def build(family: str, hidden: int = 32, layers: int = 2, seed: int = 0):
    """(model, processor) of a tiny random-init model of `family`."""
    import transformers as tf

    if family not in _MARKERS:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    torch.manual_seed(seed)
    tok = build_tokenizer(family)
    vocab = len(tok)
    ids = tok.convert_tokens_to_ids
    template = chat_template(_MARKERS[family], _VIDEO_MARKERS.get(family))
    videos = _video(family)
    llama = _text("LlamaConfig", vocab, hidden, layers)
    config, processor = _FAMILY_PARTS[family](
        family=family,
        tok=tok,
        vocab=vocab,
        ids=ids,
        template=template,
        videos=videos,
        llama=llama,
        hidden=hidden,
        layers=layers,
    )
    model = tf.AutoModelForImageTextToText.from_config(config)
    _randomise_zero_weights(model)
    model.generation_config.eos_token_id = None  # fixed-length outputs in comparisons
    return model.eval(), processor


def _llava(*, tok, ids, template, llama, hidden, **_):
    """The config and processor of a tiny llava model."""
    import transformers as tf

    config = tf.LlavaConfig(
        vision_config=_clip(hidden),
        text_config=llama,
        image_token_index=ids("<image>"),
        image_seq_length=16,
        vision_feature_layer=-1,
    )
    image = _pil("CLIPImageProcessorPil", size={"height": 32, "width": 32}, crop_size=32, **NORM)
    processor = _processor("LlavaProcessor")(
        image_processor=image,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=template,
    )
    return config, processor


def _llava_next(*, tok, ids, template, videos, llama, hidden, family, **_):
    """The config and processor of a tiny llava_next / llava_next_video model."""
    import transformers as tf

    video = family == "llava_next_video"
    config = (tf.LlavaNextVideoConfig if video else tf.LlavaNextConfig)(
        vision_config=_clip(hidden),
        text_config=llama,
        image_token_index=ids("<image>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_layer=-1,
        **({"video_token_index": ids("<video>")} if video else {}),
    )
    image = _pil(
        "LlavaNextImageProcessorPil",
        size={"shortest_edge": 32},
        crop_size={"height": 32, "width": 32},
        image_grid_pinpoints=PINPOINTS,
        **NORM,
    )
    processor = _processor("LlavaNextVideoProcessor" if video else "LlavaNextProcessor")(
        image_processor=image,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=template,
        **videos,
    )
    return config, processor


def _llava_onevision(*, tok, vocab, ids, template, videos, hidden, layers, **_):
    """The config and processor of a tiny llava_onevision model."""
    import transformers as tf

    config = tf.LlavaOnevisionConfig(
        vision_config=_siglip(hidden),
        text_config=_text("Qwen2Config", vocab, hidden, layers),
        image_token_index=ids("<image>"),
        video_token_index=ids("<video>"),
        image_grid_pinpoints=PINPOINTS,
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
    )
    image = _pil(
        "LlavaOnevisionImageProcessorPil",
        size={"height": 32, "width": 32},
        image_grid_pinpoints=PINPOINTS,
        **NORM,
    )
    processor = _processor("LlavaOnevisionProcessor")(
        image_processor=image,
        tokenizer=tok,
        num_image_tokens=16,
        vision_feature_select_strategy="full",
        chat_template=template,
        **videos,
    )
    return config, processor


def _qwen2_vl(*, tok, vocab, ids, template, videos, hidden, layers, family, **_):
    """The config and processor of a tiny qwen2_vl / qwen2_5_vl model."""
    import transformers as tf

    text = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 3, 3],
        },
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    vision = dict(
        depth=1,
        hidden_size=hidden,
        embed_dim=hidden,
        num_heads=2,
        patch_size=8,
        spatial_merge_size=2,
        temporal_patch_size=2,
        in_chans=3,
    )
    if family == "qwen2_5_vl":
        vision.update(intermediate_size=2 * hidden, out_hidden_size=hidden, window_size=32)
        vision.update(fullatt_block_indexes=[0])
        cls = tf.Qwen2_5_VLConfig
    else:
        vision.update(mlp_ratio=2)
        cls = tf.Qwen2VLConfig
    config = cls(
        text_config=text,
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    image = _pil(
        "Qwen2VLImageProcessorPil",
        min_pixels=16 * 16,
        max_pixels=64 * 64,
        patch_size=8,
        merge_size=2,
        temporal_patch_size=2,
        **NORM,
    )
    proc_cls = _processor("Qwen2_5_VLProcessor" if family == "qwen2_5_vl" else "Qwen2VLProcessor")
    processor = proc_cls(image_processor=image, tokenizer=tok, chat_template=template, **videos)
    return config, processor


def _idefics3(*, tok, ids, template, videos, llama, hidden, family, **_):
    """The config and processor of a tiny idefics3 / smolvlm model."""
    import transformers as tf

    vision = _vision(
        "Idefics3VisionConfig" if family == "idefics3" else "SmolVLMVisionConfig", hidden
    )
    cls = tf.Idefics3Config if family == "idefics3" else tf.SmolVLMConfig
    config = cls(
        vision_config=vision,
        text_config=llama,
        scale_factor=2,
        image_token_id=ids("<image>"),
    )
    pil = "Idefics3ImageProcessorPil" if family == "idefics3" else "SmolVLMImageProcessorPil"
    image = _pil(
        pil,
        size={"longest_edge": 64},
        max_image_size={"longest_edge": 32},
        do_image_splitting=True,
        **NORM,
    )
    proc_cls = _processor("Idefics3Processor" if family == "idefics3" else "SmolVLMProcessor")
    processor = proc_cls(
        image_processor=image, tokenizer=tok, image_seq_len=4, chat_template=template, **videos
    )
    return config, processor


def _gemma3(*, tok, vocab, ids, template, hidden, layers, **_):
    """The config and processor of a tiny gemma3 model."""
    import transformers as tf

    text = _text(
        "Gemma3TextConfig",
        vocab,
        hidden,
        layers,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"] * (layers // 2)
        + ["sliding_attention"] * (layers % 2),
    )
    config = tf.Gemma3Config(
        text_config=text,
        vision_config=_siglip(hidden),
        mm_tokens_per_image=4,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )
    image = _pil("Gemma3ImageProcessorPil", size={"height": 32, "width": 32}, **NORM)
    processor = _processor("Gemma3Processor")(
        image_processor=image, tokenizer=tok, image_seq_length=4, chat_template=template
    )
    return config, processor


def _mistral3(*, tok, vocab, ids, template, hidden, layers, **_):
    """The config and processor of a tiny mistral3 model."""
    import transformers as tf

    vision = _vision("PixtralVisionConfig", hidden, image=64, head_dim=hidden // 2)
    config = tf.Mistral3Config(
        vision_config=vision,
        text_config=_text("MistralConfig", vocab, hidden, layers, sliding_window=None),
        image_token_index=ids("[IMG]"),
        spatial_merge_size=2,
        vision_feature_layer=-1,
    )
    image = _pil("PixtralImageProcessorPil", size={"longest_edge": 64}, patch_size=8, **NORM)
    processor = _processor("PixtralProcessor")(
        image_processor=image,
        tokenizer=tok,
        patch_size=8,
        spatial_merge_size=2,
        chat_template=template,
    )
    return config, processor


# family -> the function making its config and processor (each names the shared parts it reads)
_FAMILY_PARTS = {
    "llava": _llava,
    "llava_next": _llava_next,
    "llava_next_video": _llava_next,
    "llava_onevision": _llava_onevision,
    "qwen2_vl": _qwen2_vl,
    "qwen2_5_vl": _qwen2_vl,
    "idefics3": _idefics3,
    "smolvlm": _idefics3,
    "gemma3": _gemma3,
    "mistral3": _mistral3,
}


def _randomise_zero_weights(model) -> None:
    """Give all-zero weight matrices (Gemma3's image projection starts at zero) random values,
    so that images change the logits of a random model."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and not param.any():
                torch.nn.init.normal_(param, std=0.02)
                del name


def save(family: str, out: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Build and save a tiny model of `family` into `out` (model, processor, tokenizer)."""
    model, processor = build(family, hidden, layers, seed)
    out = Path(out)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    if family in VIDEO and not processors.has_torchvision():
        # what the family's own video processor saves, so that installs with torchvision load it
        name, settings = VIDEO[family]
        config = {"video_processor_type": name, **settings, **NORM}
        (out / video_processing.CONFIG_NAME).write_text(json.dumps(config, indent=2))
    return out


# ---- Janus (image generation) ------------------------------------------------------------------

JANUS_SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>", "<begin_of_image>"]


def build_janus(hidden: int = 32, layers: int = 2, codes: int = 64, seed: int = 0):
    """A tiny random `JanusForConditionalGeneration` and its tokenizer: a Llama stack, a SigLIP
    tower, and a VQ model of `codes` codes over a 4 x 4 latent grid (8 x 8 pixel images, 16 codes
    each); its generation config names BOS, padding and begin-of-image, as Janus-Pro's does."""
    from transformers import JanusConfig, JanusForConditionalGeneration

    tokenizer = toy_processor.word_level_tokenizer(
        JANUS_SPECIALS, {}, JANUS_SPECIALS[4:], template=""
    )
    text = _text_config_dict(len(tokenizer), hidden, layers, tokenizer)
    vision = dict(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, image_size=32,
        patch_size=8, num_image_tokens=16, projection_dim=hidden,
    )  # fmt: skip
    vq = dict(
        embed_dim=4, num_embeddings=codes, base_channels=32, channel_multiplier=[1, 1],
        num_res_blocks=1, num_patches=4, latent_channels=32, projection_dim=hidden,
        image_token_embed_dim=hidden,
    )  # fmt: skip
    config = JanusConfig(
        text_config=text, vision_config=vision, vq_config=vq, image_token_id=tokenizer.unk_token_id
    )
    torch.manual_seed(seed)
    model = JanusForConditionalGeneration(config).eval()
    generation = model.generation_config
    generation.bos_token_id = tokenizer.bos_token_id
    generation.pad_token_id = tokenizer.pad_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    boi = tokenizer.convert_tokens_to_ids("<begin_of_image>")
    generation.generation_kwargs = {"boi_token_id": boi}
    return model, tokenizer


def _text_config_dict(vocab: int, hidden: int, layers: int, tokenizer) -> dict:
    return dict(
        model_type="llama", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip


def save_janus(
    out: str | Path, hidden: int = 32, layers: int = 2, seed: int = 0, vq_from: Path | None = None
) -> Path:
    """Build and save a tiny Janus; `vq_from`: a saved one whose VQ model (codebook and
    decoder) this one takes, as Janus-Pro 1B and 7B share theirs (a draft and its target)."""
    model, tokenizer = build_janus(hidden, layers, seed=seed)
    if vq_from is not None:
        from transformers import JanusForConditionalGeneration

        source = JanusForConditionalGeneration.from_pretrained(vq_from)
        model.model.vqmodel.load_state_dict(source.model.vqmodel.state_dict())
    out = Path(out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
