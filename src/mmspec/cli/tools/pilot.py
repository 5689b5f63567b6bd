"""`mmspec pilot`: a partial config capping a sweep's datasets at a few samples: a pilot run whose
finished jobs give `mmspec plan --pilot` its estimates."""

from __future__ import annotations

import argparse
import sys

from mmspec.sweep.arguments import sweep_files

HELP = (
    "a partial config capping a sweep's datasets at a few samples: a pilot run whose finished "
    "jobs give `mmspec plan --pilot` its estimates"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does and print a partial config that caps each dataset "
        "its cells read at --samples samples (its source's size key: an HF dataset's `limit`, "
        "a toy dataset's `samples`). Run the sweep with it in a folder of its own, then give "
        "that folder's results to `mmspec plan --pilot` for the full sweep's device-hours and "
        "disk (docs/running-at-scale.md, 'Planning a run')."
    )
    sweep_files(p)
    p.add_argument("--samples", type=int, default=4, help="samples per dataset (default 4)")


def main(args: argparse.Namespace) -> None:
    from mmspec.planning import plan
    from mmspec.sweep import config

    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    cfg = config.load_as_snakemake(args.config, args.default)
    override, whole = plan.pilot_override(cfg, args.samples)
    for name in whole:
        print(
            f"mmspec pilot: dataset {name}: its source declares no size key, it runs whole",
            file=sys.stderr,
        )
    print(plan.pilot_text(override, args.config, args.samples), end="")
