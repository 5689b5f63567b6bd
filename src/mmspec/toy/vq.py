"""A patch VQ tokenizer for the toy image world: k-means codes of image patches.

An image of side S is cut into (S / patch)^2 patches of patch x patch RGB pixels, each replaced by
the nearest of `codes` code vectors (pixel values in [0, 1]) learned by k-means over the training
images' patches (k-means++ seeding, Lloyd iterations, seeded: the same images and seed give the
same codebook). Decoding pastes each code's patch back. The code vectors are the latent space in
which LANTERN finds a code's neighbours, as a VQ-VAE's codebook embeddings are for real models.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

CONFIG = "vq_config.json"
WEIGHTS = "vq_codebook.safetensors"


class PatchVQ:
    def __init__(self, codebook: torch.Tensor, patch: int):
        self.codebook = codebook.float()  # [codes, patch * patch * 3]
        self.patch = patch

    @property
    def codes(self) -> int:
        return self.codebook.shape[0]

    def patches(self, images: np.ndarray) -> torch.Tensor:
        """uint8 images [N, S, S, 3] -> patches [N, (S / patch)^2, patch * patch * 3] in [0, 1],
        row-major over the grid."""
        n, side = images.shape[0], images.shape[1]
        if side % self.patch or images.shape[2] != side:
            raise ValueError(
                f"images of {images.shape[1:3]} pixels do not tile into {self.patch}-px patches"
            )
        g = side // self.patch
        x = torch.as_tensor(images, dtype=torch.float32) / 255
        x = x.view(n, g, self.patch, g, self.patch, 3).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(n, g * g, -1)

    def encode(self, images: np.ndarray) -> torch.Tensor:
        """The code grid of each image, [N, (S / patch)^2] code indices."""
        flat = self.patches(images)
        return _nearest(flat.reshape(-1, flat.shape[-1]), self.codebook).view(flat.shape[:2])

    def decode(self, codes: torch.Tensor) -> np.ndarray:
        """Code grids [N, L] -> uint8 images [N, S, S, 3]."""
        n, length = codes.shape
        g = int(round(length**0.5))
        if g * g != length:
            raise ValueError(f"a code grid of {length} codes is not square")
        x = self.codebook[codes].view(n, g, g, self.patch, self.patch, 3).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(n, g * self.patch, g * self.patch, 3)
        return (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy()

    @classmethod
    def fit(cls, images: np.ndarray, codes: int, patch: int, seed: int = 0, iters: int = 20):
        """k-means over the images' patches (see the module docstring)."""
        flat = cls(torch.zeros(1, patch * patch * 3), patch).patches(images)
        data = flat.reshape(-1, flat.shape[-1])
        if len(data) < codes:
            raise ValueError(f"{len(data)} patches cannot seed {codes} codes")
        g = torch.Generator().manual_seed(seed)
        centres = _kmeans_pp(data, codes, g)
        for _ in range(iters):
            assign = _nearest(data, centres)
            sums = torch.zeros_like(centres).index_add_(0, assign, data)
            counts = torch.bincount(assign, minlength=codes).unsqueeze(1)
            empty = counts[:, 0] == 0  # an empty code keeps its centre
            centres = torch.where(empty.unsqueeze(1), centres, sums / counts.clamp_min(1))
        return cls(centres, patch)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({"codebook": self.codebook.contiguous()}, str(folder / WEIGHTS))
        (folder / CONFIG).write_text(json.dumps({"patch": self.patch, "codes": self.codes}))

    @classmethod
    def load(cls, folder: str | Path) -> PatchVQ:
        folder = Path(folder)
        config = json.loads((folder / CONFIG).read_text())
        return cls(load_file(str(folder / WEIGHTS))["codebook"], config["patch"])


def _nearest(data: torch.Tensor, centres: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    out = torch.empty(len(data), dtype=torch.long)
    for start in range(0, len(data), chunk):
        out[start : start + chunk] = torch.cdist(data[start : start + chunk], centres).argmin(-1)
    return out


def _kmeans_pp(data: torch.Tensor, k: int, g: torch.Generator) -> torch.Tensor:
    """k-means++ seeding: each next centre drawn in proportion to its squared distance."""
    centres = [data[int(torch.randint(len(data), (1,), generator=g))]]
    far = ((data - centres[0]) ** 2).sum(-1)
    for _ in range(k - 1):
        if float(far.sum()) == 0:  # fewer distinct patches than codes: repeat one
            centres.append(centres[-1])
            continue
        pick = int(torch.multinomial(far, 1, generator=g))
        centres.append(data[pick])
        far = torch.minimum(far, ((data - data[pick]) ** 2).sum(-1))
    return torch.stack(centres)
