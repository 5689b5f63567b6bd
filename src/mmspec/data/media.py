"""The visual items of a prepared sample: images and videos, in prompt order.

A prepared row keeps every picture it shows in `images` / `image_ids` (a video as its sampled
frames, in order) and marks in its chat messages where each goes: `{"type": "image"}` takes one
picture, `{"type": "video", "frames": n}` the next n. A model family with a video path of its own
(LLaVA-OneVision's pooling, LLaVA-NeXT-Video's resampler, Qwen2-VL's temporal patches) reads a
video item as one video; every other family reads its frames as images (`frames_as_images`).
"""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VIDEO = "video"
IMAGE = "image"
# A dataset task whose prompt is text (a caption) and whose output is an image: its rows' pictures
# are the references generated images are scored against, not part of the prompt.
IMAGE_GENERATION = "image_generation"
# The other task: a prompt (text, images, video) in, a text answer out.
ANSWER = "answer"


def video_item(frames: int) -> dict:
    return {"type": VIDEO, "frames": frames}


@dataclass(frozen=True)
class Item:
    """One visual item: an image (one picture id) or a video (its frames' ids)."""

    kind: str  # IMAGE or VIDEO
    ids: tuple[str, ...]

    @property
    def key(self) -> str:
        """The visual cache's key: the image's id, or a video's id derived from its frames."""
        return self.ids[0] if self.kind == IMAGE else video_id(self.ids)


def video_id(frame_ids) -> str:
    return "video-" + hashlib.sha1("/".join(frame_ids).encode()).hexdigest()


def _visual_items(messages: list[dict]):
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            yield from (item for item in content if item.get("type") in (IMAGE, VIDEO))


def frames_as_images(messages: list[dict]) -> list[dict]:
    """The messages with each video item replaced by one image item per frame."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(i.get("type") == VIDEO for i in content):
            expanded = []
            for item in content:
                if item.get("type") == VIDEO:
                    expanded += [{"type": IMAGE} for _ in range(item["frames"])]
                else:
                    expanded.append(item)
            message = {**message, "content": expanded}
        out.append(message)
    return out


def has_video(messages: list[dict]) -> bool:
    return any(item["type"] == VIDEO for item in _visual_items(messages))


def items(messages: list[dict], image_ids: list[str], videos: bool, where: str) -> list[Item]:
    """The visual items of a sample in prompt order: videos as videos when the model reads them
    (`videos`), else as their frames; `where` names the sample in errors."""
    counts = []
    for item in _visual_items(messages):
        n = 1 if item["type"] == IMAGE else item.get("frames")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{where}: a video item needs a positive `frames` count, got {item}")
        counts.append((item["type"], n))
    if sum(n for _, n in counts) != len(image_ids):
        raise ValueError(
            f"{where}: the messages place {sum(n for _, n in counts)} pictures but the row has "
            f"{len(image_ids)} images"
        )
    out, used = [], 0
    for kind, n in counts:
        ids = tuple(image_ids[used : used + n])
        used += n
        if kind == VIDEO and videos:
            out.append(Item(VIDEO, ids))
        else:
            out += [Item(IMAGE, (i,)) for i in ids]
    return out


def prompt_text(messages: list[dict], where: str, text_only: bool = True) -> str:
    """The text of the last user message: a text-only prompt's (image generation's caption),
    or with `text_only` False the question asked beside its images (what a judge reads)."""
    users = [m for m in messages if m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    parts = [content] if isinstance(content, str) else content or []
    if text_only and any(isinstance(p, dict) and p.get("type") != "text" for p in parts):
        raise ValueError(f"{where}: an image-generation prompt must be text only")
    parts = [p for p in parts if isinstance(p, str) or p.get("type") == "text"]
    text = " ".join(p if isinstance(p, str) else p.get("text", "") for p in parts).strip()
    if not text:
        raise ValueError(f"{where}: no prompt text in the last user message")
    return text


def to_png(value: Any) -> bytes:
    """Decode one image value (PIL image, {'bytes', 'path'} dict, raw bytes, or a path: str or
    Path) to RGB PNG."""
    import PIL.Image

    if isinstance(value, bytes | bytearray):
        value = {"bytes": bytes(value), "path": None}
    if isinstance(value, str | Path):  # the datasets library's decoder takes paths in a dict
        value = {"bytes": None, "path": str(value)}
    if not isinstance(value, PIL.Image.Image):
        if not isinstance(value, dict):
            raise TypeError(f"not an image value: {type(value).__name__}")
        import datasets

        value = datasets.Image().decode_example(value)  # also applies the EXIF orientation
    buffer = io.BytesIO()
    value.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def png_bytes(img: np.ndarray) -> bytes:
    """PNG encoding of an RGB uint8 image; the same pixels always give the same bytes.

    Written with zlib rather than Pillow: ten times faster, and the bytes (hence the image ids,
    which key the visual cache) do not change with the Pillow version. Pillow reads it back.
    """
    h, w, _ = img.shape
    rows = np.zeros((h, 1 + 3 * w), dtype=np.uint8)  # each row: filter type 0, then RGB bytes
    rows[:, 1:] = img.reshape(h, 3 * w)
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 1))
        + _png_chunk(b"IEND", b"")
    )


def image_id(png: bytes) -> str:
    """Content hash of an encoded image (the key of the visual cache)."""
    return hashlib.sha1(png).hexdigest()
