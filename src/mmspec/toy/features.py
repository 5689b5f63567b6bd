"""A trained toy FID feature network's folder (`toy.image_nets`) as the score stage reads it:
the toy model source's reader for FID features (`toy.model_source`)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForImageClassification

from mmspec.scoring.image_metrics import PooledFeatures
from mmspec.toy.image_nets import is_feature_network, pixels


def read(folder: str | Path) -> torch.nn.Module | None:
    """FID's feature extractor of a toy feature network's folder (its classifier's CLS features
    on the toy pixels); None for another folder."""
    if not (Path(folder).is_dir() and is_feature_network(folder)):
        return None
    return PooledFeatures(AutoModelForImageClassification.from_pretrained(str(folder)), pixels)
