"""Stage cache_visual: vision features of every distinct image (and, for families with a video
path, every distinct video) of a dataset, once per model."""

from __future__ import annotations

import argparse
import io
import json
import sys

import pyarrow as pa
import torch
from PIL import Image
from tqdm import tqdm

from mmspec.data import media
from mmspec.decoding.timing import pick_device
from mmspec.models import families, loading, visual
from mmspec.storage.tables import PREPARED, VISUAL, read_table, write_table

HELP = "vision features of every image of a dataset"
GPU = True
WARM = True


def distinct_images(prepared: pa.Table) -> dict[str, bytes]:
    """image_id -> PNG bytes, in order of first appearance."""
    out: dict[str, bytes] = {}
    for ids, images in zip(
        prepared.column("image_ids").to_pylist(), prepared.column("images").to_pylist(), strict=True
    ):
        for image_id, png in zip(ids, images, strict=True):
            out.setdefault(image_id, png)
    return out


def distinct_items(
    prepared: pa.Table, path: str, videos: bool, pngs: dict[str, bytes]
) -> tuple[dict[str, bytes], dict[str, tuple[str, ...]]]:
    """(image id -> PNG, video id -> its frames' image ids) of a dataset's image and video items
    in order of first appearance (`pngs`: its distinct pictures); with `videos` off every video
    is read as its frames."""
    if not videos:
        return pngs, {}
    images, clips = {}, {}
    for row in prepared.select(["sample_id", "turn", "messages", "image_ids"]).to_pylist():
        where = f"{path}: sample {row['sample_id']} turn {row['turn']}"
        for item in media.items(json.loads(row["messages"]), row["image_ids"], True, where):
            if item.kind == media.VIDEO:
                clips.setdefault(item.key, item.ids)
            else:
                images.setdefault(item.key, pngs[item.key])
    return images, clips


def run(
    model_ref: str, prepared_path: str, out: str, dtype: str, threads: int, batch_size: int = 64
) -> int:
    torch.set_num_threads(threads)
    device = pick_device()
    prepared = read_table(prepared_path, PREPARED)
    rows = []
    if prepared.num_rows and any(prepared.column("image_ids").to_pylist()):
        with loading.about(model_ref):
            rows = _encode(model_ref, prepared, prepared_path, dtype, device, batch_size)
    write_table(pa.Table.from_pylist(rows, schema=VISUAL), out, VISUAL)
    return len(rows)


def _row(key: str, embeds: torch.Tensor, features: torch.Tensor | None) -> dict:
    return {
        "image_id": key,
        "n_tokens": embeds.shape[0],
        "embeds": visual.to_bytes(embeds),
        "features": None if features is None else visual.to_bytes(features),
    }


def _pil(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB")


def _encode(model_ref, prepared, prepared_path, dtype, device, batch_size) -> list[dict]:
    """One cache row per image item and, for a family that reads videos as videos, per video
    (else per frame)."""
    rows = []
    model = loading.load_model(
        model_ref, device, dtype, device_map=loading.fitting_device_map(model_ref, dtype, device)
    )
    processor = loading.load_processor(model_ref)
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        raise ValueError(f"{model_ref}: has no image processor, cannot encode images")
    family = families.family_of(model)
    pictures = distinct_images(prepared)
    images, videos = distinct_items(prepared, prepared_path, family.video is not None, pictures)
    items = list(images.items())
    for i in tqdm(range(0, len(items), batch_size), desc=f"cache_visual {model_ref}"):
        chunk = items[i : i + batch_size]
        pil = [_pil(png) for _, png in chunk]
        if family.pooled_view:
            # one crop per image (LLaVA-1.5): batched, with the pre-projector features
            pixels = image_processor(images=pil, return_tensors="pt")["pixel_values"]
            features, embeds = visual.encode_images(model, pixels)
        else:
            embeds = [visual.encode_image(model, image_processor, image) for image in pil]
            features = [None] * len(pil)
        rows += [_row(key, e, f) for (key, _), f, e in zip(chunk, features, embeds, strict=True)]
    if videos:
        video_processor = getattr(processor, "video_processor", None)
        if video_processor is None:
            raise ValueError(f"{model_ref}: its processor has no video processor")
        for key, ids in tqdm(videos.items(), desc=f"cache_visual {model_ref} videos"):
            frames = [_pil(pictures[i]) for i in ids]
            rows.append(_row(key, visual.encode_video(model, video_processor, frames), None))
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF id, local dir or toy:<name>")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    n = run(args.model, args.prepared, args.out, args.dtype, args.threads)
    print(f"cached {n} images -> {args.out}", file=sys.stderr)
