"""The toy world's image generator: a Llama over VQ code grids, conditioned on a caption and
trained with condition dropout for classifier-free guidance (as LlamaGen and Janus are).

A sequence is `<bos> caption <boi> c_1 ... c_L`: the caption's words, then the image's L codes
(row-major over the grid of `toy.vq.PatchVQ`), each code a token `<c{i}>` of one vocabulary with the
words. With probability `cfg_dropout` the caption is left out (`<bos> <boi> c_1 ...`): the
unconditional rows that guidance subtracts. The loss is on the codes only.

The folder is an ordinary `save_pretrained` Llama plus its tokenizer, the VQ codebook
(`vq.PatchVQ.save`) and `imagegen.json` (code ids, grid length), so it loads through the same
path as any causal LM and its codebook through `codebook_of` (an image-generation cell reads it
through `toy.generator`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaForCausalLM

from mmspec.models import random_llava
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as toyworld
from mmspec.toy.recipe import ToyRecipe
from mmspec.toy.vq import PatchVQ

IGNORE = toy_training.IGNORE
SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>", "<boi>"]
META = "imagegen.json"


def code_token(code: int) -> str:
    return f"<c{code}>"


@dataclass(frozen=True)
class ImageGenMeta:
    """Where the image codes sit in the vocabulary, and the grid a generation fills."""

    code_offset: int  # vocabulary id of code 0; codes are consecutive
    codes: int
    grid: int  # codes per image (its length in tokens)
    bos: int
    boi: int  # begin-of-image: the last prompt token

    def save(self, folder: Path) -> None:
        (folder / META).write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, folder: str | Path) -> ImageGenMeta:
        path = Path(folder) / META
        if not path.exists():
            raise FileNotFoundError(f"{folder}: no {META}; not an image-generation model")
        return cls(**json.loads(path.read_text()))

    def prompt(self, tokenizer, caption: str | None) -> list[int]:
        """The prompt ids: conditional (a caption) or unconditional (None)."""
        words = tokenizer.encode(caption, add_special_tokens=False) if caption else []
        return [self.bos, *words, self.boi]

    def guided_prompts(self, tokenizer, caption: str) -> list[list[int]]:
        """The (conditional, unconditional) prompt pair a guided generation starts from."""
        return [self.prompt(tokenizer, caption), self.prompt(tokenizer, None)]

    @property
    def code_range(self) -> tuple[int, int]:
        """The vocabulary ids [start, stop) of the image codes: all a generation may emit."""
        return self.code_offset, self.code_offset + self.codes


def build_tokenizer(codes: int):
    """The toy vocabulary's words plus `<boi>` and one token per code."""
    return toy_processor.word_level_tokenizer(
        SPECIALS, {}, [code_token(c) for c in range(codes)], template=""
    )


def meta_of(tokenizer, codes: int, grid: int) -> ImageGenMeta:
    ids = tokenizer.convert_tokens_to_ids([code_token(c) for c in range(codes)])
    if ids != list(range(ids[0], ids[0] + codes)):
        raise ValueError("the code tokens are not consecutive in the vocabulary")
    return ImageGenMeta(
        ids[0], codes, grid, tokenizer.bos_token_id, tokenizer.convert_tokens_to_ids("<boi>")
    )


def build_model(recipe: ToyRecipe, tokenizer, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    size = random_llava.Size(recipe.hidden, recipe.layers, recipe.heads)
    return LlamaForCausalLM(random_llava.llama_config(size, tokenizer, max_positions=256))


def encode_examples(examples, vq: PatchVQ, tokenizer, meta: ImageGenMeta, dropout: float, seed):
    """(input ids, labels) per (caption, image): the caption dropped with probability `dropout`,
    labels on the codes only."""
    rng = np.random.default_rng(seed)
    captions, images = zip(*examples, strict=True)
    grids = vq.encode(np.stack(images)) + meta.code_offset
    out = []
    for caption, grid in zip(captions, grids.tolist(), strict=True):
        prompt = meta.prompt(tokenizer, None if rng.random() < dropout else caption)
        out.append((prompt + grid, [IGNORE] * len(prompt) + grid))
    return out


NO_IMAGES = np.zeros((0, toyworld.SIZE, toyworld.SIZE, 3), np.uint8)  # the prompt is text only


def _batch(rows, pad: int) -> dict:
    """`toy_training.collate` of (ids, labels) rows."""
    return toy_training.collate(
        [{"ids": x, "labels": y, "images": NO_IMAGES} for x, y in rows], pad
    )


def train(recipe: ToyRecipe, out_dir: str | Path, seed: int, threads: int = 1) -> dict:
    """Fit the VQ codebook on textured toy images, train the generator, save the folder."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    vq_images = [img for _, img in toyworld.imagegen_examples(recipe.vq_images, seed, stream=2)]
    vq = PatchVQ.fit(np.stack(vq_images), recipe.codes, recipe.patch, seed=seed)
    tokenizer = build_tokenizer(recipe.codes)
    grid = (toyworld.SIZE // recipe.patch) ** 2
    meta = meta_of(tokenizer, recipe.codes, grid)
    model = build_model(recipe, tokenizer, seed)
    size = recipe.batch_size
    examples = list(toyworld.imagegen_examples(recipe.steps * size, seed))
    rows = encode_examples(examples, vq, tokenizer, meta, recipe.cfg_dropout, seed)
    losses = toy_training.fit(
        model,
        lambda step: _batch(rows[step * size : (step + 1) * size], tokenizer.pad_token_id),
        recipe,
        f"train {Path(out_dir).name}",
    )
    model.eval()
    parts = [model, tokenizer, vq.save, meta.save]
    return toy_training.save_trained(out_dir, parts, recipe, seed, start, losses)


def codebook_of(folder: str | Path) -> tuple[torch.Tensor, int]:
    """(code vectors [codes, dim], vocabulary id of code 0): what LANTERN's neighbours read."""
    meta = ImageGenMeta.load(folder)
    return PatchVQ.load(folder).codebook, meta.code_offset


def confidence(model, rows) -> tuple[float, float]:
    """Mean top-1 and top-10 probability the model gives its next code, teacher-forced over
    `rows` (from `encode_examples`): how flat its distributions are (LANTERN's Figure 2c)."""
    examples = (({"input_ids": torch.tensor([ids])}, labels) for ids, labels in rows)
    return toy_training.confidence(model, examples)
