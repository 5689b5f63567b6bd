"""The job that collects an EAGLE head's training data on an image generator, for the tests
that train such a head by hand (test_image_heads, test_janus)."""

from __future__ import annotations

from mmspec.data.media import IMAGE_GENERATION
from mmspec.sweep.jobs import TrainDrafterJob
from mmspec.sweep.settings import Generation, Pair


def image_head_job(target: str, cfg: float) -> TrainDrafterJob:
    """Collecting reads no training hyperparameter of an EAGLE head: `training` stays empty."""
    return TrainDrafterJob(
        pair=Pair(target=target, dtype="float32"),
        kind="eagle",
        training={},
        task=IMAGE_GENERATION,
        generation=Generation(max_new_tokens=8, cfg=cfg, top_k=0),
        seed=0,
    )
