"""`mmspec plan`: cells, packed Slurm jobs and device hours of a sweep, before running it."""

from __future__ import annotations

import argparse

from mmspec.sweep.arguments import sweep_files

HELP = "cells, packed Slurm jobs and device hours of a sweep, before running it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does and print its cells (done and to run under "
        "--results), the Slurm jobs the slurm profile packs the cells to run into, and per pair "
        "an estimate of the device hours they need from the pair's earlier cells."
    )
    sweep_files(p)
    p.add_argument("--results", default="results", help="the workflow's results folder")
    p.add_argument(
        "--pilot",
        help="estimate from the finished jobs of this results folder (a pilot run's, "
        "`mmspec pilot`) instead of --results",
    )
    p.add_argument(
        "--profile",
        default="slurm/config.yaml",
        help="the Slurm profile: its folder or its config.yaml (default slurm/config.yaml)",
    )


def main(args: argparse.Namespace) -> None:
    from mmspec.planning import plan
    from mmspec.sweep import config
    from mmspec.sweep.cells import expand

    cfg = config.load_as_snakemake(args.config, args.default)
    expansion = expand(cfg)
    profile = plan.profile_file(args.profile)
    planned = plan.plan(cfg, args.results, expansion.cells, args.pilot)
    packed = plan.group_size(profile)
    print(plan.render(planned, packed, expansion.merged, cfg["timing"], profile))
