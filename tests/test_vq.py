"""The toy image world's patch VQ tokenizer: k-means codes of patches, encode, decode, save."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmspec.toy import world as toyworld
from mmspec.toy.vq import PatchVQ


def _images(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([toyworld.render(toyworld.random_scene(rng)) for _ in range(n)])


def test_codebook_is_reproducible_and_reconstructs_held_out_images(tmp_path):
    train = _images(200)
    vq = PatchVQ.fit(train, codes=48, patch=4, seed=1)
    assert torch.equal(vq.codebook, PatchVQ.fit(train, codes=48, patch=4, seed=1).codebook)
    assert not torch.equal(vq.codebook, PatchVQ.fit(train, codes=48, patch=4, seed=2).codebook)
    held_out = _images(20, seed=7)
    grids = vq.encode(held_out)
    assert grids.shape == (20, 64) and int(grids.max()) < 48
    error = np.abs(vq.decode(grids).astype(int) - held_out.astype(int)).mean()
    blank = np.abs(held_out.astype(int)).mean()  # the error of decoding every patch as black
    assert error < 0.25 * blank
    assert torch.equal(vq.encode(vq.decode(grids)), grids)  # decoded codes encode to themselves
    vq.save(tmp_path / "vq")
    again = PatchVQ.load(tmp_path / "vq")
    assert torch.equal(again.codebook, vq.codebook) and again.patch == 4


def test_bad_shapes_are_named():
    vq = PatchVQ.fit(_images(50), codes=16, patch=4)
    with pytest.raises(ValueError, match=r"do not tile into 5-px patches"):
        PatchVQ(vq.codebook[:, :75], 5).encode(_images(1))
    with pytest.raises(ValueError, match="a code grid of 10 codes is not square"):
        vq.decode(torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="cannot seed"):
        PatchVQ.fit(_images(1), codes=100, patch=4)
