"""FID's interval: the Frechet distance from features matches torchmetrics' FID, and the paired
bootstrap over prompts brackets a cell's FID and AR FID / FID (exactly 1 where the cell's images
are AR's)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmspec.scoring import image_metrics


class MeanColours(torch.nn.Module):
    """A feature network small enough for a test: each quadrant's mean colour (12 features)."""

    num_features = 12

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        h, w = images.shape[-2] // 2, images.shape[-1] // 2
        quads = [
            images[..., i * h : (i + 1) * h, j * w : (j + 1) * w] for i in (0, 1) for j in (0, 1)
        ]
        return torch.cat([q.double().mean((-1, -2)) for q in quads], -1)


def images(n: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(128 + shift, 30, size=(n, 1, 1, 3)) + rng.normal(0, 20, size=(n, 8, 8, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def test_frechet_of_features_is_torchmetrics_fid():
    features = MeanColours()
    ref, gen = images(40, 0), images(40, 1, shift=20)
    ours = image_metrics.frechet(
        *(image_metrics.image_features(x, features, 16) for x in (ref, gen))
    )
    assert ours == pytest.approx(image_metrics.fid(ref, gen, features), rel=1e-6)


def test_fid_intervals_bracket_the_points_and_pair_the_prompts():
    features = MeanColours()
    ref, near, far = (
        image_metrics.image_features(images(60, s, d), features)
        for s, d in [(0, 0), (1, 5), (2, 40)]
    )
    out = image_metrics.fid_intervals(ref, far, near, resamples=100)
    assert out["fid_low"] < out["fid"] < out["fid_high"]
    ratio = out["ar_fid"] / out["fid"]
    assert out["fid_retention_low"] < ratio < out["fid_retention_high"] < 1  # far is worse
    assert out == image_metrics.fid_intervals(ref, far, near, resamples=100)  # seeded
    # the cell's images are AR's: every resample's ratio is 1
    same = image_metrics.fid_intervals(ref, near, near, resamples=50)
    assert same["fid_retention_low"] == same["fid_retention_high"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two"):
        image_metrics.fid_intervals(ref[:1], near[:1], near[:1])


def test_intervals_bracket_the_points_where_few_images_meet_wide_features():
    """24 prompts in a 16-dimensional feature space (the toy world's FID runs on 24 images): a
    resample repeats images, so its FID runs far above the point, and the bootstrap's own
    percentiles lie above it; the intervals, shifted by that bias, bracket the points."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(24, 16, generator=g, dtype=torch.float64)
    ar = torch.randn(24, 16, generator=g, dtype=torch.float64) + 0.3
    gen = torch.randn(24, 16, generator=g, dtype=torch.float64) + 0.5
    out = image_metrics.fid_intervals(ref, gen, ar, resamples=200)
    picks = np.random.default_rng(0).integers(0, 24, size=(200, 24))
    raw = [image_metrics.frechet(ref[p], gen[p]) for p in map(torch.as_tensor, picks)]
    assert np.percentile(raw, 2.5) > out["fid"]  # the plain percentiles miss the point
    assert 0 <= out["fid_low"] < out["fid"] < out["fid_high"]
    ratio = out["ar_fid"] / out["fid"]
    assert out["fid_retention_low"] < ratio < out["fid_retention_high"]
