"""Stage prepare: a dataset, by its source (`data.source`) -> results/prepared/<name>.parquet."""

from __future__ import annotations

import argparse
import sys

from mmspec.data import source as dataset_source
from mmspec.sweep.arguments import json_object

HELP = "write results/prepared/<dataset>.parquet"


def run(name: str, spec: dict, out: str, toy_seed: int) -> int:
    """Write the prepared table of dataset `name` (its config entry `spec`) as its source
    prepares it; returns the number of rows. `toy_seed`: the config's `toy.seed`, the seed of
    generated samples."""
    return dataset_source.of(spec).prepare(name, spec, out, toy_seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True)
    parser.add_argument(
        "--spec", type=json_object, required=True, help="the dataset's config entry (JSON)"
    )
    parser.add_argument("--toy-seed", type=int, default=0)
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    n = run(args.name, args.spec, args.out, args.toy_seed)
    print(f"prepared {args.name}: {n} rows -> {args.out}", file=sys.stderr)
