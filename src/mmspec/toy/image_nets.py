"""The toy world's image-metric networks, trained by the workflow and saved as HF folders:

- a **feature network** for FID (`ViTForImageClassification`): it learns what is drawn in each
  quadrant of a textured toy image (empty, or one of the colour-shape kinds), and its pooled
  features stand where Inception's do for real images;
- a **CLIP** (`CLIPModel`): image and caption encoders trained contrastively on (caption,
  textured image) pairs, for CLIP score.

Real runs name Inception weights and a CLIP id instead (scoring.image_metrics).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from transformers import (
    CLIPConfig,
    CLIPModel,
    CLIPProcessor,
    CLIPTextConfig,
    CLIPVisionConfig,
    ViTConfig,
    ViTForImageClassification,
)

from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as toyworld
from mmspec.toy.recipe import ToyRecipe

KINDS = [(colour, shape) for colour in toyworld.COLOURS for shape in toyworld.SHAPES]
CLASSES = 1 + len(KINDS)  # per quadrant: empty, or a colour-shape kind


def quadrant_labels(scene: toyworld.Scene) -> list[int]:
    """The class of each quadrant in POSITIONS order: 0 empty, 1 + the index of its kind."""
    drawn = {o.pos: 1 + KINDS.index((o.colour, o.shape)) for o in scene}
    return [drawn.get(pos, 0) for pos in toyworld.POSITIONS]


def pixels(images) -> torch.Tensor:
    """uint8 images [N, 32, 32, 3] or [N, 3, 32, 32] -> the networks' inputs, as the toy
    processors normalise them."""
    x = torch.as_tensor(np.asarray(images))
    if x.shape[1] == 3 and x.shape[-1] != 3:
        x = x.permute(0, 2, 3, 1)
    return toy_processor.pixel_values(x)


def _scenes(n: int, seed: int, stream: int):
    rng = np.random.default_rng([seed, stream])
    for _ in range(n):
        scene = toyworld.random_scene(rng)
        yield scene, toyworld.render_textured(scene, rng)


def train_features(recipe: ToyRecipe, out_dir: str | Path, seed: int, threads: int = 1) -> dict:
    """Train the quadrant classifier whose pooled features FID compares; save it."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    config = ViTConfig(
        image_size=toyworld.SIZE,
        patch_size=recipe.patch,
        num_channels=3,
        hidden_size=recipe.hidden,
        intermediate_size=2 * recipe.hidden,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_labels=len(toyworld.POSITIONS) * CLASSES,
    )
    model = ViTForImageClassification(config)
    data = list(_scenes(recipe.steps * recipe.batch_size, seed, stream=5))
    size = recipe.batch_size

    def batch_at(step: int) -> dict:
        chunk = data[step * size : (step + 1) * size]
        images = pixels(np.stack([img for _, img in chunk]))
        labels = torch.tensor([quadrant_labels(scene) for scene, _ in chunk])
        return {"pixel_values": images, "labels": labels}

    model.loss_function = _quadrant_loss
    start = time.perf_counter()
    losses = toy_training.fit(model, batch_at, recipe, f"train {Path(out_dir).name}")
    model.eval()
    return toy_training.save_trained(out_dir, [model], recipe, seed, start, losses)


def is_feature_network(folder: str | Path) -> bool:
    """Whether `folder` holds a toy FID feature network: trained here (training.json) and saved
    without an image processor, since it reads `pixels`."""
    folder = Path(folder)
    trained = (folder / "training.json").exists()
    return trained and not (folder / "preprocessor_config.json").exists()


def _quadrant_loss(labels, logits, *args, **kwargs) -> torch.Tensor:
    """Cross-entropy of each quadrant's class (logits [N, 4 * CLASSES], labels [N, 4])."""
    per_quadrant = logits.view(-1, len(toyworld.POSITIONS), CLASSES)
    return torch.nn.functional.cross_entropy(per_quadrant.reshape(-1, CLASSES), labels.view(-1))


@torch.inference_mode()
def quadrant_accuracy(model, images: np.ndarray, scenes) -> float:
    """Share of quadrants the feature network classifies right (how much its features know)."""
    logits = model(pixel_values=pixels(images)).logits.view(-1, len(toyworld.POSITIONS), CLASSES)
    truth = torch.tensor([quadrant_labels(s) for s in scenes])
    return float((logits.argmax(-1) == truth).float().mean())


def train_clip(recipe: ToyRecipe, out_dir: str | Path, seed: int, threads: int = 1) -> dict:
    """Train a small CLIP on (caption, textured image) pairs; save it with its processor."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    processor = clip_processor()
    tokenizer = processor.tokenizer
    hidden = recipe.hidden
    text = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        max_position_embeddings=48,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    vision = CLIPVisionConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        image_size=toyworld.SIZE,
        patch_size=4,
    )
    config = CLIPConfig(
        text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=hidden
    )
    model = CLIPModel(config)
    data = list(_scenes(recipe.steps * recipe.batch_size, seed, stream=6))
    size = recipe.batch_size

    def batch_at(step: int) -> dict:
        chunk = data[step * size : (step + 1) * size]
        captions = [toyworld.caption(scene) for scene, _ in chunk]
        encoded = tokenizer(captions, padding=True, return_tensors="pt")
        return {
            "input_ids": encoded.input_ids,
            "attention_mask": encoded.attention_mask,
            "pixel_values": pixels(np.stack([img for _, img in chunk])),
            "return_loss": True,
        }

    start = time.perf_counter()
    losses = toy_training.fit(model, batch_at, recipe, f"train {Path(out_dir).name}")
    model.eval()
    return toy_training.save_trained(out_dir, [model, processor], recipe, seed, start, losses)


def clip_processor() -> CLIPProcessor:
    """The toy CLIP's processor: the toy word tokenizer (with <bos>/<eos> around a caption,
    as CLIP's text encoder pools at the end token) and 32 x 32 images scaled to [-1, 1]."""
    tokenizer = toy_processor.word_level_tokenizer(
        ["<pad>", "<unk>", "<bos>", "<eos>"], {}, [], template=""
    )
    tokenizer._tokenizer.post_processor = _bos_eos(tokenizer)
    images = toy_processor.image_processor()
    return CLIPProcessor(image_processor=images, tokenizer=tokenizer)


def _bos_eos(tokenizer):
    from tokenizers.processors import TemplateProcessing

    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", bos), ("<eos>", eos)]
    )
