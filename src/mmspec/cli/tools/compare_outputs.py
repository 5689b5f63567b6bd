"""`mmspec compare-outputs`: whether two results folders' cells decode the same tokens (exit 1 if
not)."""

from __future__ import annotations

import argparse

HELP = "whether two results folders' cells decode the same tokens (exit 1 if not)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Compare every cell two results folders both have, sample-turn by sample-turn: output "
        "token ids and each step's drafted and accepted counts (no timings). Exits 1 when a "
        "cell differs or only one folder has it."
    )
    p.add_argument("first", help="a results folder (with generate/)")
    p.add_argument("second", help="another results folder")


def main(args: argparse.Namespace) -> int:
    from mmspec.cli import compare

    result = compare.compare(args.first, args.second)
    print(compare.render(result))
    return 0 if result.identical else 1
