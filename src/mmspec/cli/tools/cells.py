"""`mmspec cells`: validate a config and list its cells."""

from __future__ import annotations

import argparse
import sys

HELP = "validate a config and list its cells"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Validate config files and list their cells, reading them as `snakemake --configfile A "
        "B ...` does: merged in order (mappings recursively: `sweep_extra` rows add up); files "
        "that declare `datasets`, `pairs` and `methods` are a whole sweep; others (e.g. only "
        "`generation: {max_new_tokens: 16}`, or a dataset and the rows that run it) are merged "
        "over the default sweep, config/config.yaml of the working directory (--default)."
    )
    p.add_argument(
        "config",
        nargs="+",
        help="a whole sweep, or a partial override of the default sweep (several: merged in order)",
    )
    p.add_argument(
        "--default",
        default="config/config.yaml",
        help="the sweep a file that is not a whole sweep overrides (default: config/config.yaml)",
    )
    p.add_argument(
        "--commands",
        choices=["generate", "judge", "score"],
        help="print each cell's command of this stage instead of its path (what its batch job "
        "runs for it: mmspec.workflow.batches)",
    )


def main(args: argparse.Namespace) -> None:
    from mmspec.planning.plan import merged_line
    from mmspec.sweep import cell_keys, config
    from mmspec.sweep.cells import expand
    from mmspec.workflow import batches

    cfg = config.load_as_snakemake(args.config, args.default)
    expansion = expand(cfg)
    if args.commands:
        planned = batches.of_sweep(cfg, expansion.cells)[args.commands]
        for batch in planned.values():
            for job in batch.jobs:
                print(cell_keys.command_line(job))
    for cell in expansion.cells if not args.commands else ():
        print(cell.path)
    sys.stdout.flush()  # the paths before the count, where both streams share a terminal
    print(f"{len(expansion.cells)} cells from {expansion.grid_points} grid points", file=sys.stderr)
    if expansion.merged:
        print(merged_line(expansion.merged), file=sys.stderr)
