"""The VLM families mmspec runs, and the few facts about each that its code needs.

Everything else that is family-specific (image processing and tiling, the vision tower and
projector, merging features into the text, positions, image masks) is the family's own
transformers code, reached through one path: `get_image_features` for the visual cache
(`models.visual`) and the multimodal forward with `mm_encoder_outputs` for prompts
(`models.prompts`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Family:
    """features_as_tensor: the forward takes cached features as one [N, H] tensor (else one per
    image); multi_axis_positions: M-RoPE position ids [3, L]; bidirectional_images: an image's
    tokens attend to each other in the prompt; pooled_view: view P (2x2 pooling of one crop's
    square patch grid before the projector) is defined; video: how the forward takes cached
    video features, for families with a video path of their own (`get_video_features`), else
    None (frames are read as images): "one_batch" one [1, N, H] tensor for all videos,
    "per_video" one [n, H] per video."""

    name: str
    features_as_tensor: bool = False
    multi_axis_positions: bool = False
    bidirectional_images: bool = False
    pooled_view: bool = False
    video: str | None = None


FAMILIES = {
    f.name: f
    for f in [
        Family("llava", pooled_view=True),
        Family("llava_next"),
        Family("llava_onevision", video="one_batch"),
        Family("llava_next_video", video="one_batch"),
        Family("qwen2_vl", multi_axis_positions=True, video="per_video"),
        Family("qwen2_5_vl", multi_axis_positions=True, video="per_video"),
        Family("idefics3"),
        Family("smolvlm"),
        Family("gemma3", features_as_tensor=True, bidirectional_images=True),
        Family("mistral3"),
    ]
}


def supported() -> str:
    return ", ".join(FAMILIES)


def check_config(config, what: str) -> Family | None:
    """The family of a multimodal model config (None for a text-only LM), or a clear error."""
    return check_config_dict(config.to_dict() if hasattr(config, "to_dict") else config, what)


# Families that generate images (models.image_generation reads them), not answers: image
# generation cells only, with no visual prompt to cache.
IMAGE_GENERATORS = ("janus",)


def generates_images(config: dict) -> bool:
    """Whether a config.json (as a dict) is an image generator's."""
    return config.get("model_type") in IMAGE_GENERATORS


def check_config_dict(config: dict, what: str) -> Family | None:
    """As check_config, for a config.json read as a dict (no transformers import)."""
    if "vision_config" not in config:
        return None
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type)
    if family is None:
        classes = ", ".join(config.get("architectures") or [str(model_type)])
        raise ValueError(
            f"{what}: model family {model_type!r} ({classes}) is not supported; "
            f"supported multimodal families: {supported()}"
        )
    return family


def local_files(ref: str) -> Path | None:
    """The folder holding a model's files without downloading: a local directory, or the
    newest snapshot of a hub id in the Hugging Face cache; None if neither exists."""
    path = Path(ref)
    if (path / "config.json").exists():
        return path
    if ref.count("/") != 1 or path.exists():
        return None
    cache = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    snapshots = cache / ("models--" + ref.replace("/", "--")) / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def tokenizer_vocabulary(folder: Path) -> dict[str, int] | None:
    """token -> id from a folder's tokenizer.json (None if it has none)."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    vocab = data.get("model", {}).get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
    vocab = dict(vocab or {})
    vocab.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
    return vocab


def family_of(model) -> Family:
    family = check_config(model.config, type(model).__name__)
    if family is None:
        raise ValueError(f"{type(model).__name__} is not a multimodal model")
    return family


def visual_token_ids(config) -> list[int]:
    """The ids of the tokens that image (and video) features replace."""
    ids = []
    for key in ("image_token_id", "image_token_index", "video_token_id", "video_token_index"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value not in ids:
            ids.append(value)
    if not ids:
        raise ValueError(f"{config.model_type}: its config names no image token id")
    return ids
