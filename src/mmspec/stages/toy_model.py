"""Stage toy_model: train one toy-world model -> results/models/toy/<name>/ (save_pretrained).

The recipe's `kind` picks what is trained: a captioner (models.toy_training), an image generator
(models.toy_imagegen), or a network the image metrics read (models.toy_image_nets).
"""

from __future__ import annotations


def run(name: str, spec: dict, out_dir: str, seed: int, threads: int) -> dict:
    kind = spec.get("kind", "captioner")
    if kind == "captioner":
        from mmspec.models import toy_training

        return toy_training.train(spec, out_dir, seed=seed, threads=threads)
    if kind == "image_generator":
        from mmspec.models import toy_imagegen

        return toy_imagegen.train(spec, out_dir, seed=seed, threads=threads)
    from mmspec.models import toy_image_nets

    trainers = {"fid_features": toy_image_nets.train_features, "clip": toy_image_nets.train_clip}
    if kind not in trainers:
        raise ValueError(f"toy.models.{name}: unknown kind {kind!r}")
    return trainers[kind](spec, out_dir, seed=seed, threads=threads)
