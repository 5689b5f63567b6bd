"""Code fingerprints: a hash of the package source each stage runs, for Snakemake `params:`.

Snakemake does not see edits to an installed package; putting this hash in a rule's params makes
a change to a stage's code rerun that stage (and what depends on its outputs), nothing else.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

# Loading a model and its processor and encoding its images and videos (the stages with models).
MODEL_CODE = [
    "models/loading.py",
    "models/families.py",
    "models/footprint.py",
    "models/processors.py",
    "models/video_processing.py",
    "models/visual.py",
    "data/media.py",
]
# The decoding engine, and torch as its modules import it (mmspec.lazy).
DECODING_CODE = ["decoding", "lazy.py"]
# Reading an image generator: its prompts, codes and VQ decoder (generate).
IMAGE_GENERATOR_CODE = [
    "models/image_generation.py",
    "toy/__init__.py",
    "toy/imagegen.py",
    "models/vq.py",
    "models/loading.py",
    # imported by toy_imagegen for training, which the stages do not run
    "toy/training.py",
    "toy/recipe.py",
    "toy/processor.py",
    "toy/world.py",
]
# The modules (files or folders, relative to the package) whose code each stage executes.
STAGE_CODE = {
    "claims": ["stages/claims.py", "claims", "tables.py"],
    "prepare": [
        "stages/prepare.py",
        "toy/__init__.py",
        "toy/world.py",
        "data/hf.py",
        "schema.py",
        "data/video.py",
        "data/media.py",
        "tables.py",
    ],
    "toy_model": [
        "toy/recipe.py",
        "schema.py",  # a recipe's defaults
        "stages/toy_model.py",
        "toy/__init__.py",
        "toy/training.py",
        "toy/processor.py",
        "toy/imagegen.py",
        "toy/image_nets.py",
        "models/vq.py",
        "toy/world.py",
        "data/media.py",
    ],
    "cache_visual": [
        "stages/cache_visual.py",
        *MODEL_CODE,
        "decoding/timing.py",
        "lazy.py",  # torch as decoding/timing.py imports it
        "tables.py",
    ],
    "caption": [
        "stages/settings.py",
        "schema.py",  # the settings' defaults
        "stages/caption.py",
        "stages/cache_visual.py",
        "models/captioner.py",
        *MODEL_CODE,
        "decoding/timing.py",
        "lazy.py",  # torch as decoding/timing.py imports it
        "tables.py",
    ],
    "generate": [
        "stages/generate.py",
        "stages/checkpoints.py",
        "stages/jobs.py",
        "stages/settings.py",
        "schema.py",  # the defaults a hand-written job omits
        *DECODING_CODE,
        "methods",
        *MODEL_CODE,
        "models/prompts.py",
        *IMAGE_GENERATOR_CODE,
        "tables.py",
    ],
    "train_drafter": [
        "stages/train_drafter.py",
        "stages/generate.py",  # its prompts and greedy answers are a generate job's
        "stages/checkpoints.py",
        "stages/jobs.py",
        "stages/settings.py",
        "schema.py",  # the defaults a hand-written job omits
        "training",
        *DECODING_CODE,
        "methods",
        *MODEL_CODE,
        "models/prompts.py",
        *IMAGE_GENERATOR_CODE,
        "tables.py",
    ],
    "score": [
        "stages/settings.py",
        "schema.py",  # the settings' defaults
        "stages/score.py",
        "scoring",
        "toy/metric.py",  # the toy datasets' task metric
        "toy/quality.py",
        "toy/world.py",
        "data/media.py",
        *MODEL_CODE,
        "toy/__init__.py",
        "toy/image_nets.py",  # the toy FID network's pixel normalisation
        "toy/training.py",  # imported by toy_image_nets for training
        "toy/recipe.py",
        "toy/processor.py",
        "tables.py",
    ],
    "judge": [
        "stages/settings.py",
        "schema.py",  # the settings' defaults
        "stages/judge.py",
        "scoring/judge",
        "toy/__init__.py",
        "toy/quality.py",  # the embedded judge's rubric
        "toy/world.py",
        "data/media.py",
        "tables.py",
    ],
    # the registry's labels and the components' declarations (which rules are loose, which
    # drafters are trained heads) come from the catalog, which imports every component
    "aggregate": [
        "stages/aggregate.py",
        "methods",
        *DECODING_CODE,
        "data/media.py",
        "tables.py",
    ],
    "report": [
        "claims",  # the reproduction section
        "stages/report.py",
        "report",
        "methods",
        *DECODING_CODE,
        "data/media.py",
        "tables.py",
    ],
}


# Stages that read every component's declaration, and so the installed plugins' too (a generate
# or train_drafter job's code adds its own components' plugin files: components.plugin_code).
COMPONENT_STAGES = ("aggregate", "report")


def fingerprint(stage: str, package: Path = PACKAGE) -> str:
    """A short hash of the source files `stage` runs: the package's, and for the stages that
    read every component, the source files of the installed plugins' components."""
    digest = hashlib.sha256()
    for entry in STAGE_CODE[stage]:
        path = package / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(package)).encode())
            digest.update(file.read_bytes())
    if stage in COMPONENT_STAGES:
        from mmspec.decoding import catalog

        for file in catalog.plugin_files():
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
