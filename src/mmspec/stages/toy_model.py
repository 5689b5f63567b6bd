"""Stage toy_model: train one toy-world model -> results/models/toy/<name>/ (save_pretrained)."""

from __future__ import annotations


def run(name: str, spec: dict, out_dir: str, seed: int, threads: int) -> dict:
    from mmspec.models import toy_training

    return toy_training.train(spec, out_dir, seed=seed, threads=threads)
