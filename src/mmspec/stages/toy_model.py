"""Stage toy_model: train one toy-world model -> results/models/toy/<name>/ (save_pretrained).

The recipe's `kind` picks what is trained: a captioner (toy.training), an image generator
(toy.imagegen), or a network the image metrics read (toy.image_nets).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from pathlib import Path

from mmspec.storage import durable, integrity
from mmspec.sweep.arguments import json_object

HELP = "train one toy-world model"
WARM = True

# kind -> (module of mmspec.toy, its training function), imported only when trained
TRAINERS = {
    "captioner": ("training", "train"),
    "image_generator": ("imagegen", "train"),
    "fid_features": ("image_nets", "train_features"),
    "clip": ("image_nets", "train_clip"),
}


def recipe_of(spec: dict, name: str):
    """The typed recipe (toy.recipe.ToyRecipe) of config `toy.models.<name>`. The toy world
    stands above the stages (tests/test_layering.py), so it is imported by name, as the
    trainers are."""
    return importlib.import_module("mmspec.toy.recipe").ToyRecipe.parse(spec, name)


def priority(spec: dict, name: str) -> int:
    """A job's scheduling priority: its training work (steps x batch x layers x width^2, in
    units of 10^7), so the longest trainings start first and the short ones fill the other
    cores, rather than a long one starting last and holding up the run's end."""
    return recipe_of(spec, name).work // 10**7


def run(name: str, spec: dict, out_dir: str, seed: int, threads: int) -> dict:
    recipe = recipe_of(spec, name)
    if recipe.kind not in TRAINERS:
        raise ValueError(
            f"toy.models.{name}: unknown kind {recipe.kind!r}; known: {sorted(TRAINERS)}"
        )
    module, function = TRAINERS[recipe.kind]
    train = getattr(importlib.import_module(f"mmspec.toy.{module}"), function)
    # trained into a hidden folder beside it (under its own name: the progress bar's label), then
    # renamed into place whole, with its manifest (integrity)
    out = Path(out_dir)
    staging = out.parent / f".{out.name}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    work = staging / out.name
    log = train(recipe, work, seed=seed, threads=threads)
    integrity.write_manifest(work)
    durable.replace_folder(work, out)
    shutil.rmtree(staging)
    return log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True)
    parser.add_argument("--spec", type=json_object, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    log = run(args.name, args.spec, args.out, args.seed, args.threads)
    print(
        f"trained {args.name} in {log['seconds']:.0f} s, loss {log['final_loss']:.3f}",
        file=sys.stderr,
    )
