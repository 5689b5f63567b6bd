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
