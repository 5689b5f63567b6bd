"""Image metrics from torchmetrics: FID (`FrechetInceptionDistance` over a feature network) and
CLIP score (`CLIPScore` over an HF `CLIPModel`), for generated images against references and
their captions.

Both networks load from an HF folder or id through `from_pretrained`. `feature_network` reads
a folder a model source has a reader for (`models.source`: the toy world's feature networks,
32 x 32 images normalised as the toy models do) or any vision model with an image processor
(DINOv2, ViT, CLIP: the Frechet distance in its space, not Inception's FID, whose weights are
not wired in). torchmetrics' default Inception needs torch-fidelity, which breaks torch here, so
FID always takes a feature module. Images are uint8 [N, H, W, 3] arrays throughout.
"""

from __future__ import annotations

import numpy as np
import torch
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.multimodal.clip_score import CLIPScore
from transformers import CLIPModel, CLIPProcessor


class PooledFeatures(torch.nn.Module):
    """An image classifier's pooled features (ViT: the final-normed CLS token) as FID's
    feature extractor: uint8 images [N, 3, H, W] in, [N, num_features] out."""

    def __init__(self, classifier, prepare):
        super().__init__()
        self.classifier, self.prepare = classifier.eval(), prepare
        self.num_features = classifier.config.hidden_size

    @torch.inference_mode()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        inner = getattr(self.classifier, self.classifier.base_model_prefix)
        hidden = inner(pixel_values=self.prepare(images)).last_hidden_state
        return hidden[:, 0].double()


class PretrainedFeatures(torch.nn.Module):
    """A pretrained vision model's pooled image features as FID's feature extractor, its own
    image processor preparing the images: DINOv2's or a ViT's pooler output, a CLIP's image
    embedding (FD over such features is not Inception's FID: compare numbers within one)."""

    def __init__(self, ref: str):
        from transformers import AutoImageProcessor, AutoModel

        super().__init__()
        self.model = AutoModel.from_pretrained(ref).eval()
        self.processor = AutoImageProcessor.from_pretrained(ref)
        probe = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
        self.num_features = int(self.forward(probe).shape[-1])

    @torch.inference_mode()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        arrays = list(images.permute(0, 2, 3, 1).cpu().numpy())
        device = next(self.model.parameters()).device
        pixels = self.processor(images=arrays, return_tensors="pt")["pixel_values"].to(device)
        if hasattr(self.model, "get_image_features"):  # a CLIP: its projected image embedding
            return _TensorFeatures(self.model).get_image_features(pixels).double()
        return self.model(pixel_values=pixels).pooler_output.double()


def feature_network(ref: str) -> torch.nn.Module:
    """FID's feature extractor from a folder or hub id: what a model source's reader makes of
    the folder (a toy feature network: its classifier's CLS features on the toy pixels), else
    any vision model with an image processor (`PretrainedFeatures`)."""
    import importlib

    from mmspec.models import source as model_source

    for reader in model_source.readers(model_source.FID_FEATURES):
        module, _, function = reader.partition(":")
        features = getattr(importlib.import_module(module), function)(ref)
        if features is not None:
            return features
    return PretrainedFeatures(ref)


def decode_pngs(pngs: list[bytes], where: str) -> np.ndarray:
    """Encoded images of one size -> uint8 [N, H, W, 3]; `where` names their table in errors."""
    import io

    from PIL import Image

    images = [np.asarray(Image.open(io.BytesIO(png)).convert("RGB")) for png in pngs]
    sizes = sorted({i.shape for i in images})
    if len(sizes) > 1:
        raise ValueError(f"{where}: reference images of several sizes {sizes[:3]}; FID needs one")
    return np.stack(images)


def resized(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 images [N, H, W, 3] at (H, W) = `size` (bilinear), as FID's and CLIP's networks
    resize their inputs: generated images meet references of another size."""
    if images.shape[1:3] == tuple(size):
        return images
    from PIL import Image

    height, width = size
    return np.stack(
        [np.asarray(Image.fromarray(i).resize((width, height), Image.BILINEAR)) for i in images]
    )


def _channels_first(images: np.ndarray) -> torch.Tensor:
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"expected uint8 images [N, H, W, 3], got {images.dtype} {images.shape}")
    return torch.as_tensor(images).permute(0, 3, 1, 2).contiguous()


FID_RESAMPLES = 200  # bootstrap resamples of a cell's prompts (two eigensolves each)
CONFIDENCE = 0.95


def image_features(images: np.ndarray, features: torch.nn.Module, batch: int = 64):
    """`features`' vectors of uint8 images [N, H, W, 3]: float64 [N, d] on the CPU."""
    chunks = [
        features(_channels_first(images[i : i + batch])).double().cpu()
        for i in range(0, len(images), batch)
    ]
    return torch.cat(chunks)


def frechet(x: torch.Tensor, y: torch.Tensor) -> float:
    """The Frechet distance between two sets of feature vectors [N, d], as torchmetrics'
    FrechetInceptionDistance computes it (unbiased covariances; the trace of the product's
    square root from its eigenvalues)."""
    mu_x, mu_y = x.mean(0), y.mean(0)
    cov_x, cov_y = torch.cov(x.T), torch.cov(y.T)
    root = torch.linalg.eigvals(cov_x @ cov_y).sqrt().real.sum()
    return float((mu_x - mu_y).square().sum() + cov_x.trace() + cov_y.trace() - 2 * root)


def fid_intervals(ref, gen, ar, resamples: int = FID_RESAMPLES, seed: int = 0) -> dict:
    """The points and bootstrap intervals (CONFIDENCE) of a cell's FID and of AR FID / FID, from
    the features [N, d] of the reference images, the cell's and AR's, row i of each the same
    prompt: the prompts are resampled together, so what a prompt shares with AR cancels in the
    ratio.

    A resample repeats some prompts, so its covariances have fewer distinct images and its FID
    runs high: with a few dozen images in a wide feature space the whole percentile interval can
    lie above the point. Each interval is therefore the bootstrap's percentiles shifted by its
    bias (the resamples' mean minus the point), which keeps its width and centres it on what the
    bootstrap says of the point."""
    if min(len(ref), len(gen), len(ar)) < 2:
        raise ValueError("FID needs at least two reference and two generated images")
    picks = np.random.default_rng(seed).integers(0, len(gen), size=(resamples, len(gen)))
    fids, ratios = [], []
    for pick in map(torch.as_tensor, picks):
        cell, of_ar = frechet(ref[pick], gen[pick]), frechet(ref[pick], ar[pick])
        fids.append(cell)
        ratios.append(of_ar / cell if cell else np.nan)
    fid, ar_fid = frechet(ref, gen), frechet(ref, ar)
    ratio = ar_fid / fid if fid else np.nan
    (fid_low, fid_high), (ret_low, ret_high) = (
        _bias_shifted(np.asarray(v, dtype=float), point)
        for v, point in ((fids, fid), (ratios, ratio))
    )
    return {
        "fid": fid,
        "ar_fid": ar_fid,
        "fid_low": fid_low,
        "fid_high": fid_high,
        "fid_retention_low": ret_low,
        "fid_retention_high": ret_high,
    }


def _bias_shifted(values: np.ndarray, point: float) -> tuple[float, float]:
    """The CONFIDENCE percentile interval of bootstrap `values`, shifted by their bias against
    `point` and kept at or above 0 (FID and its ratio are not negative); NaN where the point or
    every value is undefined."""
    if not np.isfinite(point) or not np.isfinite(values).any():
        return float("nan"), float("nan")
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.nanpercentile(values, [tail, 100 - tail])
    bias = float(np.nanmean(values)) - point
    return max(0.0, float(low - bias)), max(0.0, float(high - bias))


def fid(references: np.ndarray, generated: np.ndarray, features: torch.nn.Module) -> float:
    """FID between reference and generated images in `features`' space."""
    if min(len(references), len(generated)) < 2:
        raise ValueError("FID needs at least two reference and two generated images")
    metric = FrechetInceptionDistance(feature=features, normalize=False)
    metric.update(_channels_first(references), real=True)
    metric.update(_channels_first(generated), real=False)
    return float(metric.compute())


class _TensorFeatures(torch.nn.Module):
    """A CLIPModel whose get_*_features return tensors (transformers 5 returns output objects,
    whose projected embedding CLIPScore expects)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config = model.eval(), model.config

    def get_image_features(self, pixel_values):
        out = self.model.get_image_features(pixel_values=pixel_values)
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    def get_text_features(self, input_ids, attention_mask):
        out = self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask)
        return out if isinstance(out, torch.Tensor) else out.pooler_output


def clip_scorer(ref: str) -> CLIPScore:
    """torchmetrics' CLIPScore over the CLIP at `ref` (a folder or id)."""
    model = _TensorFeatures(CLIPModel.from_pretrained(ref))
    processor = CLIPProcessor.from_pretrained(ref)
    return CLIPScore(model_name_or_path=lambda: (model, processor))


@torch.inference_mode()
def clip_score(images: np.ndarray, captions: list[str], scorer: CLIPScore) -> list[float]:
    """Per-image CLIP score: 100 x the cosine of image and caption embeddings, clamped at 0."""
    pixels = _channels_first(images)
    scores = []
    for image, caption in zip(pixels, captions, strict=True):
        scorer.reset()
        scores.append(float(scorer(image, caption)))
    return scores
