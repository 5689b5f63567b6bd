"""Stage cache_visual: vision features of every distinct image of a dataset, once per model."""

from __future__ import annotations

import io

import pyarrow as pa
import torch
from PIL import Image
from tqdm import tqdm

from mmspec.decoding.timing import pick_device
from mmspec.models import families, loading, visual
from mmspec.tables import PREPARED, VISUAL, read_table, write_table


def distinct_images(prepared: pa.Table) -> dict[str, bytes]:
    """image_id -> PNG bytes, in order of first appearance."""
    out: dict[str, bytes] = {}
    for ids, images in zip(
        prepared.column("image_ids").to_pylist(), prepared.column("images").to_pylist(), strict=True
    ):
        for image_id, png in zip(ids, images, strict=True):
            out.setdefault(image_id, png)
    return out


def run(
    model_ref: str, prepared_path: str, out: str, dtype: str, threads: int, batch_size: int = 64
) -> int:
    torch.set_num_threads(threads)
    device = pick_device()
    images = distinct_images(read_table(prepared_path, PREPARED))
    rows = []
    if images:
        with loading.about(model_ref):
            rows = _encode(model_ref, images, dtype, device, batch_size)
    write_table(pa.Table.from_pylist(rows, schema=VISUAL), out, VISUAL)
    return len(rows)


def _encode(model_ref: str, images: dict, dtype: str, device, batch_size: int) -> list[dict]:
    """One cache row per image."""
    rows = []
    model = loading.load_model(model_ref, device, dtype)
    processor = loading.load_processor(model_ref)
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        raise ValueError(f"{model_ref}: has no image processor, cannot encode images")
    family = families.family_of(model)
    items = list(images.items())
    for i in tqdm(range(0, len(items), batch_size), desc=f"cache_visual {model_ref}"):
        chunk = items[i : i + batch_size]
        pil = [Image.open(io.BytesIO(png)).convert("RGB") for _, png in chunk]
        if family.pooled_view:
            # one crop per image (LLaVA-1.5): batched, with the pre-projector features
            pixels = image_processor(images=pil, return_tensors="pt")["pixel_values"]
            features, embeds = visual.encode_images(model, pixels)
        else:
            embeds = [visual.encode_image(model, image_processor, image) for image in pil]
            features = [None] * len(pil)
        for (image_id, _), f, e in zip(chunk, features, embeds, strict=True):
            rows.append(
                {
                    "image_id": image_id,
                    "n_tokens": e.shape[0],
                    "embeds": visual.to_bytes(e),
                    "features": None if f is None else visual.to_bytes(f),
                }
            )
    return rows
