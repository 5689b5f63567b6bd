"""Vision features of a multimodal model: computed once per image or video, stored, read back.

`embeds` are what the family's own `get_image_features` (`get_video_features` for a video)
returns (after the projector or connector, tiles, pooling and newline tokens included: exactly
the vectors that replace the placeholder tokens), flattened to [n, H]; `features` (the selected
vision-tower layer, before the projector) are kept where a view transforms them (view P,
LLaVA-1.5's layout).
"""

from __future__ import annotations

import inspect
import io

import numpy as np
import pyarrow as pa
import torch


def vision_parts(model):
    """(vision tower, projector) of a Llava-family model, or a clear error."""
    inner = getattr(model, "model", None)
    tower = getattr(inner, "vision_tower", None)
    projector = getattr(inner, "multi_modal_projector", None)
    if tower is None or projector is None:
        raise ValueError(
            f"{type(model).__name__} has no model.vision_tower / model.multi_modal_projector: "
            "visual caching supports Llava-family models"
        )
    return tower, projector


def projector_of(model):
    """The model's projector as a function: vision features [N, D] -> embeddings [N, H]."""
    _, projector = vision_parts(model)
    device, dtype = next(projector.parameters()).device, next(projector.parameters()).dtype
    return lambda features: projector(features.to(device, dtype))


def _flatten(pooled) -> torch.Tensor:
    """get_image_features' pooler_output for one image ([n, H], [tiles, n, H] or a list of
    those) as the [n, H] rows that replace its placeholders, in order."""
    if isinstance(pooled, (list, tuple)):
        return torch.cat([_flatten(p) for p in pooled])
    return pooled.reshape(-1, pooled.shape[-1])


@torch.inference_mode()
def encode_image(model, image_processor, image) -> torch.Tensor:
    """The embeddings [n, H] of one PIL image by the family's own `get_image_features`."""
    inputs = image_processor(images=[image], return_tensors="pt")
    return _flatten(_call(model.model.get_image_features, inputs, model).pooler_output)


@torch.inference_mode()
def encode_video(model, video_processor, frames: list) -> torch.Tensor:
    """The embeddings [n, H] of one video (its frames, PIL) by the family's own
    `get_video_features` (LLaVA-OneVision's pooling and newline, LLaVA-NeXT-Video's
    resampler, Qwen2-VL's temporal patches)."""
    inputs = video_processor([frames], return_tensors="pt")
    return _flatten(_call(model.model.get_video_features, inputs, model).pooler_output)


def _call(method, inputs, model):
    """`method` with the processor outputs it accepts, pixels in the model's dtype."""
    accepted = set(inspect.signature(method).parameters)
    kwargs = {}
    for key, value in inputs.items():
        if key in accepted:
            is_pixels = torch.is_floating_point(value)
            kwargs[key] = (
                value.to(model.device, model.dtype) if is_pixels else value.to(model.device)
            )
    return method(**kwargs, return_dict=True)


@torch.inference_mode()
def encode_images(model, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(features [N, n, Dv], embeds [N, n, H]) for a batch of preprocessed images of the
    LLaVA-1.5 layout (one crop each): the features view P pools."""
    tower, projector = vision_parts(model)
    if pixel_values.dim() != 4:
        # LLaVA-NeXT / OneVision processors tile each image into crops (anyres): [N, crops, C,
        # H, W]; their token layout (crops, newline tokens, pooling) is not reproduced here
        raise NotImplementedError(
            f"{type(model).__name__}: pixel_values of shape {tuple(pixel_values.shape)}; the "
            "visual cache encodes one crop per image ([N, C, H, W], Llava-1.5 style) and does "
            "not support multi-crop (anyres) inputs yet"
        )
    config = model.config
    layer = config.vision_feature_layer
    out = tower(pixel_values.to(model.device, model.dtype), output_hidden_states=True)
    if not isinstance(layer, int):
        raise NotImplementedError("multi-layer vision_feature_layer is not supported yet")
    features = out.hidden_states[layer]
    if config.vision_feature_select_strategy == "default":
        features = features[:, 1:]  # drop CLS, as Llava does
    return features, projector(features)


def to_bytes(array: torch.Tensor) -> bytes:
    """.npy bytes of a tensor (bfloat16, which numpy lacks, is stored as float32)."""
    array = array.detach().cpu()
    if array.dtype == torch.bfloat16:
        array = array.float()
    buffer = io.BytesIO()
    np.save(buffer, array.numpy(), allow_pickle=False)
    return buffer.getvalue()


def from_bytes(blob: bytes) -> torch.Tensor:
    return torch.from_numpy(np.load(io.BytesIO(blob), allow_pickle=False))


def load_cache(table: pa.Table, column: str = "embeds") -> dict[str, torch.Tensor]:
    """image_id -> tensor from a visual-cache table."""
    ids = table.column("image_id").to_pylist()
    blobs = table.column(column).to_pylist()
    return {i: from_bytes(b) for i, b in zip(ids, blobs, strict=True) if b is not None}
