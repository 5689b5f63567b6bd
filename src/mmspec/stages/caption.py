"""Stage caption: a caption of every distinct image of a dataset, once per captioning model."""

from __future__ import annotations

import argparse
import io
import sys

import pyarrow as pa
import torch
from PIL import Image
from tqdm import tqdm

from mmspec.decoding.timing import pick_device
from mmspec.models.captioner import Captioner
from mmspec.stages.cache_visual import distinct_images
from mmspec.storage.tables import CAPTIONS, PREPARED, read_table, write_table
from mmspec.sweep.arguments import settings_of
from mmspec.sweep.settings import Captioner as CaptionerSettings

HELP = "a caption of every image of a dataset (view C)"
GPU = True


def run(spec: CaptionerSettings | dict, prepared_path: str, out: str, threads: int) -> int:
    """`spec`: the config's `captioner` entry (model, prompt, max_new_tokens, dtype)."""
    spec = CaptionerSettings.parse(spec)
    torch.set_num_threads(threads)
    images = distinct_images(read_table(prepared_path, PREPARED))
    rows = []
    if images:
        captioner = Captioner(
            spec.model, pick_device(), spec.dtype, spec.prompt, spec.max_new_tokens
        )
        items = list(images.items())
        captioner.caption(Image.open(io.BytesIO(items[0][1])).convert("RGB"))  # warm-up, untimed
        for image_id, png in tqdm(items, desc=f"caption {spec.model}"):
            text, seconds = captioner.caption(Image.open(io.BytesIO(png)).convert("RGB"))
            if not text:
                raise ValueError(f"captioner {spec.model} returned an empty caption for {image_id}")
            rows.append({"image_id": image_id, "caption": text, "caption_s": seconds})
    write_table(pa.Table.from_pylist(rows, schema=CAPTIONS), out, CAPTIONS)
    return len(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spec", type=settings_of("Captioner"), required=True, help="the config's captioner (JSON)"
    )
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    n = run(args.spec, args.prepared, args.out, args.threads)
    print(f"captioned {n} images -> {args.out}", file=sys.stderr)
