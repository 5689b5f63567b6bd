"""Video processors of the families with a video path, for installs without torchvision.

transformers' video processors are torchvision-only. Where torchvision is missing (the CPU
install) this module turns a video's frames into the family's video inputs the way the family's
video processor does (its `video_preprocessor_config.json` settings over the class defaults
below), with PIL resizing: resize (and centre-crop) each frame, rescale, normalise; Qwen2-VL's
`smart_resize` and patches of `temporal_patch_size` frames. Pixels can differ from torchvision's
resampling in the last digits; with torchvision installed the family's own processor is used.
The layout downstream (how many video tokens, positions, pooling in `get_video_features`) is
the family's own code either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
COMMON = {
    "resample": 3,  # bicubic
    "rescale_factor": 1 / 255,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
}
# family -> its video processor's class defaults (transformers 5.23,
# models/<family>/video_processing_<family>.py)
DEFAULTS = {
    "llava_onevision": {"style": "frames", "size": {"height": 384, "width": 384}},
    "llava_next_video": {
        "style": "frames",
        "size": {"shortest_edge": 224},
        "crop_size": {"height": 224, "width": 224},
        "do_center_crop": True,
    },
    "qwen2_vl": {
        "style": "patches",
        "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768},
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "cap_pixels_per_frame": False,
        "max_video_tokens": 128000,
    },
}
DEFAULTS["qwen2_5_vl"] = DEFAULTS["qwen2_vl"]
CONFIG_NAME = "video_preprocessor_config.json"


class VideoProcessor:
    """One family's video preprocessing: frames (PIL) -> `pixel_values_videos` (+ grid)."""

    model_input_names = ["pixel_values_videos"]

    def __init__(self, family: str, **settings):
        self.family = family
        self.settings = {**COMMON, **DEFAULTS[family], **settings}
        for key in ("patch_size", "temporal_patch_size", "merge_size"):
            if key in self.settings:
                setattr(self, key, self.settings[key])
        if self.settings["style"] == "patches":
            self.model_input_names = ["pixel_values_videos", "video_grid_thw"]

    @classmethod
    def from_folder(cls, family: str, folder: Path | None) -> VideoProcessor:
        """The family's defaults, overridden by the model folder's video processor config."""
        settings = {}
        path = folder / CONFIG_NAME if folder is not None else None
        if path is not None and path.exists():
            settings = json.loads(path.read_text())
            # the Qwen2-VL processor's backward-compatible pixel bounds
            size = dict(settings.get("size") or DEFAULTS[family]["size"])
            if (low := settings.pop("min_pixels", None)) is not None:
                size["shortest_edge"] = low
            if (high := settings.pop("max_pixels", None)) is not None:
                size["longest_edge"] = high
            settings["size"] = size
        known = set(COMMON) | set(DEFAULTS[family])
        return cls(family, **{k: v for k, v in settings.items() if k in known})

    def __call__(self, videos, return_metadata: bool = False, return_tensors=None, **_):
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import VideoMetadata

        videos = [list(v) for v in videos]
        if self.settings["style"] == "patches":
            data = self._patches(videos)
        else:
            data = {"pixel_values_videos": torch.stack([self._frames(v) for v in videos])}
        if return_metadata:  # frames come sampled already: no fps is known
            data["video_metadata"] = [VideoMetadata(total_num_frames=len(v)) for v in videos]
        return BatchFeature(data=data)

    def _normalised(self, frame: Image.Image, height: int, width: int) -> np.ndarray:
        s = self.settings
        frame = frame.convert("RGB")
        if s["do_resize"] and frame.size != (width, height):
            frame = frame.resize((width, height), resample=Image.Resampling(s["resample"]))
        array = np.asarray(frame, dtype=np.float32)
        if s["do_rescale"]:
            array = array * np.float32(s["rescale_factor"])
        if s["do_normalize"]:
            mean = np.asarray(s["image_mean"], dtype=np.float32)
            array = (array - mean) / np.asarray(s["image_std"], dtype=np.float32)
        return array.transpose(2, 0, 1)  # [C, H, W]

    def _frames(self, frames: list) -> torch.Tensor:
        """[T, C, H, W]: each frame resized (shortest edge, or to a fixed size), centre-cropped."""
        s = self.settings
        size, out = s["size"], []
        for frame in frames:
            width, height = frame.size
            if "shortest_edge" in size:
                short, long = sorted((height, width))
                scaled = (size["shortest_edge"], int(size["shortest_edge"] * long / short))
                height, width = scaled if height <= width else scaled[::-1]
            else:
                height, width = size["height"], size["width"]
            array = self._normalised(frame, height, width)
            if s.get("do_center_crop"):
                crop_h, crop_w = s["crop_size"]["height"], s["crop_size"]["width"]
                top, left = (height - crop_h) // 2, (width - crop_w) // 2
                array = array[:, top : top + crop_h, left : left + crop_w]
            out.append(torch.from_numpy(np.ascontiguousarray(array)))
        return torch.stack(out)

    def _patches(self, videos: list[list]) -> dict:
        """Qwen2-VL: frames resized to multiples of patch x merge, grouped into temporal patches
        (the last frame repeated to fill one), flattened in the merge order the model expects."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        s = self.settings
        patch, merge, temporal = s["patch_size"], s["merge_size"], s["temporal_patch_size"]
        factor = patch * merge
        rows, grids = [], []
        for frames in videos:
            width, height = frames[0].size
            max_pixels = s["size"]["longest_edge"]
            if s.get("cap_pixels_per_frame"):
                total = int(s["max_video_tokens"] * factor * factor * 0.9)
                max_pixels = max(
                    min(max_pixels, total * temporal // len(frames)),
                    int(s["size"]["shortest_edge"] * 1.05),
                )
            height, width = smart_resize(
                height, width, factor, s["size"]["shortest_edge"], max_pixels
            )
            video = torch.stack(
                [torch.from_numpy(self._normalised(f, height, width)) for f in frames]
            )
            if pad := -len(frames) % temporal:
                video = torch.cat([video, video[-1:].expand(pad, -1, -1, -1)])
            t, channels = video.shape[0] // temporal, video.shape[1]
            h, w = height // patch, width // patch
            patches = video.view(
                t, temporal, channels, h // merge, merge, patch, w // merge, merge, patch
            )
            patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
            rows.append(patches.reshape(t * h * w, channels * temporal * patch * patch))
            grids.append([t, h, w])
        return {"pixel_values_videos": torch.cat(rows), "video_grid_thw": torch.tensor(grids)}


def load(family: str, folder: Path | None) -> VideoProcessor | None:
    """The video processor of a family with a video path (None for the others)."""
    return VideoProcessor.from_folder(family, folder) if family in DEFAULTS else None
