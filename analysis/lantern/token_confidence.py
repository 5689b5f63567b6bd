"""Token selection ambiguity (LANTERN's Figure 2c) in the toy world: the mean top-1 and top-10
probability a model gives its next token, teacher-forced on held-out data, for the captioning
target (text answers about an image) beside the image generator (image codes from a caption).

    python analysis/lantern/token_confidence.py --text results/models/toy/target \
        --image results/models/toy/image_target

A visual AR model spreads its next-token mass over many similar codes, a language model much
less: LANTERN's relaxation is built for the first case.
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse

import numpy as np
import torch

from mmspec.models import loading
from mmspec.toy import imagegen as toy_imagegen
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as toyworld
from mmspec.toy.vq import PatchVQ


def text_confidence(folder: str, n: int, seed: int) -> tuple[float, float]:
    model = loading.load_model(folder, torch.device("cpu"), "float32")
    tokenizer = loading.tokenizer_of(loading.load_processor(folder))

    def examples():
        for messages, images in toyworld.training_examples(["toy_caption"], n, seed):
            ids, labels = toy_training.encode_example(messages, tokenizer, text_only=False)
            pixels = toy_processor.pixel_values(np.stack(images))
            yield {"input_ids": torch.tensor([ids]), "pixel_values": pixels}, labels

    return toy_training.confidence(model, examples())


def image_confidence(folder: str, n: int, seed: int) -> tuple[float, float]:
    model = loading.load_model(folder, torch.device("cpu"), "float32")
    tokenizer = loading.load_processor(folder)
    meta = toy_imagegen.ImageGenMeta.load(folder)
    examples = list(toyworld.imagegen_examples(n, seed, stream=3))  # held out from training
    rows = toy_imagegen.encode_examples(examples, PatchVQ.load(folder), tokenizer, meta, 0.0, seed)
    return toy_imagegen.confidence(model, rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", required=True, help="a captioning model folder")
    p.add_argument("--image", required=True, help="an image generator folder")
    p.add_argument("--samples", type=int, default=50)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = [
        ("captioning target, caption tokens", text_confidence(args.text, args.samples, args.seed)),
        ("image generator, image codes", image_confidence(args.image, args.samples, args.seed)),
    ]
    print(f"{'model':40s} {'top-1':>7s} {'top-10':>7s}")
    for name, (top1, top10) in rows:
        print(f"{name:40s} {top1:7.3f} {top10:7.3f}")


if __name__ == "__main__":
    main()
