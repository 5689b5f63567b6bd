"""`mmspec stand-in-datasets`: save small local stand-ins of a config's HF datasets (offline, for
rehearsals); prints the --config argument that points the config at them."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "save small local stand-ins of a config's HF datasets (offline, for rehearsals); prints "
    "the --config argument that points the config at them"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="a config file, e.g. config/presets/sage.yaml")
    p.add_argument("out", help="the folder to save them in (one subfolder per dataset)")
    p.add_argument("--rows", type=int, default=4)


def main(args: argparse.Namespace) -> None:
    from mmspec.sweep import config
    from mmspec.toy import stand_in

    override = stand_in.write_all(config.load(args.config), Path(args.out), args.rows)
    print(stand_in.as_cli(override))
