"""A dataset row's video as sampled frames: read from a path, bytes or an HF Video value,
decoded with PyAV (`pip install av`, the `video` extra), `frames` of them spread uniformly.

Each frame is stored as a PNG image; a family with a video path of its own then reads them as
one video, any other as that many images (`data.media`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image

from mmspec.data.hf_spec import VideoColumn
from mmspec.data.media import to_png


def video_frames(where: str, video: VideoColumn, value: Any) -> list[bytes]:
    """PNG bytes of `video.frames` frames sampled uniformly over the video in one cell.

    A list value is the video's frames already (images); anything else is a video file: a path,
    its bytes, or an HF Video value ({'bytes', 'path'}), decoded with PyAV.
    """
    if isinstance(value, list | tuple):
        if not value:
            raise ValueError(f"{where}: the video has no frames (empty list)")
        picked = sample_indices(len(value), video.frames)
        return [_frame_png(where, index, value[index]) for index in picked]
    source = _video_source(where, video, value)
    images = _decode_video(where, source, video.frames)
    return [to_png(image) for image in images]


def sample_indices(total: int, frames: int) -> list[int]:
    """`frames` frame indices spread uniformly over `total` frames, the first and last included
    (np.linspace, as lmms-eval and SpecVLM sample); every frame when there are no more."""
    if total <= frames:
        return list(range(total))
    return np.linspace(0, total - 1, frames).astype(int).tolist()


def _frame_png(where: str, index: int, frame: Any) -> bytes:
    """One listed frame as PNG: an image value, or an array of uint8 pixels (H x W [x C])."""
    try:
        if isinstance(frame, np.ndarray | list):
            array = np.asarray(frame)
            if array.ndim == 3 and array.shape[-1] == 1:
                array = array[..., 0]
            if array.dtype.kind not in "iu" or array.size == 0 or array.ndim not in (2, 3):
                raise TypeError(
                    f"pixels must be H x W [x C] integers, got {array.dtype} {array.shape}"
                )
            if array.min() < 0 or array.max() > 255:
                raise ValueError("pixel values must lie in 0..255")
            frame = PIL.Image.fromarray(array.astype(np.uint8))
        return to_png(frame)
    except Exception as err:
        raise ValueError(f"{where}, frame {index}: cannot decode frame: {err}") from err


def _video_source(where: str, video: VideoColumn, value: Any) -> str | bytes:
    """The video file of one cell: its bytes, or the path of an existing file."""
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, dict) and value.get("bytes"):
        return bytes(value["bytes"])
    if isinstance(value, dict) and value.get("path"):
        path = Path(value["path"]).expanduser()
        described = f"video file {str(path)!r} (the value's `path`)"
    elif isinstance(value, str) and value:
        name = value + video.suffix
        path = Path(video.dir).expanduser() / name if video.dir else Path(name).expanduser()
        parts = [f"value {value!r}"]
        parts += [f"`video.dir` {video.dir!r}"] if video.dir else []
        parts += [f"`video.suffix` {video.suffix!r}"] if video.suffix else []
        described = f"video file {str(path)!r} (from {' + '.join(parts)})"
    elif value is None or value == "" or isinstance(value, dict):
        raise ValueError(f"{where}: no video in this row")
    else:
        raise ValueError(f"{where}: not a video value: {type(value).__name__}")
    if not path.is_file():
        raise ValueError(f"{where}: {described} does not exist")
    return str(path)


def _decode_video(where: str, source: str | bytes, frames: int) -> list[PIL.Image.Image]:
    """`frames` RGB frames sampled uniformly over the video at `source` (a path or file bytes).

    Frame counts in container headers are missing in some files and approximate in others, so
    the frames are counted by decoding when the header has none, and sampled again over the
    frames that really decode when the header promised more.
    """
    try:
        import av  # imported here: an optional dependency, needed by video files only
    except ImportError as err:
        raise ImportError(
            f"{where}: decoding video files needs PyAV, which is not installed: pip install av"
        ) from err
    what = "video bytes" if isinstance(source, bytes) else f"video file {source!r}"
    try:
        total = _header_frame_count(av, source)
        if total <= 0:
            total = _count_frames(av, source)
        for _ in range(2):
            if total <= 0:
                break
            wanted = sample_indices(total, frames)
            images, decoded = _decode_frames(av, source, wanted)
            if len(images) == len(wanted):
                return images
            total = decoded  # the header overstated the frame count
    except Exception as err:
        raise ValueError(f"{where}: cannot read {what}: {type(err).__name__}: {err}") from err
    raise ValueError(f"{where}: cannot read {what}: no video frame decodes")


def _open_video(av, source: str | bytes):
    return av.open(io.BytesIO(source) if isinstance(source, bytes) else source)


def _video_stream(container):
    if not container.streams.video:
        raise ValueError("the file has no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return stream


def _header_frame_count(av, source: str | bytes) -> int:
    with _open_video(av, source) as container:
        return int(_video_stream(container).frames or 0)


def _count_frames(av, source: str | bytes) -> int:
    with _open_video(av, source) as container:
        return sum(1 for _ in container.decode(_video_stream(container)))


def _decode_frames(av, source: str | bytes, wanted: list[int]) -> tuple[list, int]:
    """The frames at the sorted indices `wanted` as RGB images, and how many frames were read."""
    keep = set(wanted)
    images, read = [], 0
    with _open_video(av, source) as container:
        for index, frame in enumerate(container.decode(_video_stream(container))):
            read = index + 1
            if index in keep:
                images.append(frame.to_image())
            if index >= wanted[-1]:
                break
    return images, read
