"""Image metrics through torchmetrics over the toy world's own networks: the FID feature network
learns what each quadrant holds, FID separates distributions, CLIP score prefers the right
caption; bad inputs are named."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoModelForImageClassification

from mmspec.scoring import image_metrics
from mmspec.toy import image_nets as toy_image_nets
from mmspec.toy import world as toyworld
from mmspec.toy.recipe import ToyRecipe

# the recipe the image world will train (about 40 s); smaller ones stay near "empty" everywhere
FEATURES = dict(hidden=64, layers=2, heads=4, patch=4, steps=1500, batch_size=32, lr=2e-3)
CLIP = dict(hidden=32, layers=1, heads=2, steps=200, batch_size=32, lr=3e-3)


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    root = tmp_path_factory.mktemp("image_nets")
    features = ToyRecipe.parse(FEATURES, kind="fid_features")
    toy_image_nets.train_features(features, root / "features", seed=0)
    toy_image_nets.train_clip(ToyRecipe.parse(CLIP, kind="clip"), root / "clip", seed=0)
    return root / "features", root / "clip"


def _draws(n: int, seed: int):
    return list(toy_image_nets._scenes(n, seed, stream=8))


def test_feature_network_reads_the_quadrants(nets):
    model = AutoModelForImageClassification.from_pretrained(nets[0]).eval()
    held_out = _draws(200, seed=3)
    images = np.stack([img for _, img in held_out])
    accuracy = toy_image_nets.quadrant_accuracy(model, images, [s for s, _ in held_out])
    labels = [label for s, _ in held_out for label in toy_image_nets.quadrant_labels(s)]
    empty = np.mean([label == 0 for label in labels])
    assert accuracy > 0.9 > empty  # far above always answering "empty"


def test_fid_separates_distributions(nets):
    features = image_metrics.feature_network(str(nets[0]))
    references = np.stack([img for _, img in _draws(120, seed=1)])
    same = np.stack([img for _, img in _draws(120, seed=2)])
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, size=same.shape, dtype=np.uint8)
    blank = np.zeros_like(same)
    close = image_metrics.fid(references, same, features)
    assert 0 <= close < image_metrics.fid(references, noise, features)
    assert close < image_metrics.fid(references, blank, features)
    with pytest.raises(ValueError, match=r"expected uint8 images \[N, H, W, 3\]"):
        image_metrics.fid(references, same.astype(np.float32), features)
    with pytest.raises(ValueError, match="at least two"):
        image_metrics.fid(references, same[:1], features)


def test_clip_score_prefers_the_right_caption(nets):
    scorer = image_metrics.clip_scorer(str(nets[1]))
    draws = _draws(24, seed=4)
    images = np.stack([img for _, img in draws])
    captions = [toyworld.caption(scene) for scene, _ in draws]
    right = image_metrics.clip_score(images, captions, scorer)
    wrong = image_metrics.clip_score(images, captions[1:] + captions[:1], scorer)
    assert len(right) == 24 and all(0 <= s <= 100 for s in right + wrong)
    assert np.mean(right) > np.mean(wrong) + 10


def test_any_vision_model_with_an_image_processor_gives_fid_features(tmp_path, nets):
    """Real runs name a pretrained vision model (DINOv2 here, tiny and random): FID over its
    pooled features, generated images resized by its own processor."""
    from transformers import BitImageProcessorPil, Dinov2Config, Dinov2Model

    config = Dinov2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8,
    )  # fmt: skip
    Dinov2Model(config).save_pretrained(tmp_path)
    size = {"shortest_edge": 32}
    BitImageProcessorPil(size=size, crop_size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    features = image_metrics.feature_network(str(tmp_path))
    assert isinstance(features, image_metrics.PretrainedFeatures) and features.num_features == 32
    assert isinstance(image_metrics.feature_network(str(nets[0])), image_metrics.PooledFeatures)
    a, b = (np.stack([img for _, img in _draws(12, seed)]) for seed in (0, 1))
    assert image_metrics.fid(a, a, features) == pytest.approx(0.0, abs=1e-6)
    assert image_metrics.fid(a, b, features) > 0
