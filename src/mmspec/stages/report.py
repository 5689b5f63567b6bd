"""Stage report: the HTML report of a sweep (mmspec.report.page)."""

from __future__ import annotations

import argparse

from mmspec.sweep.arguments import json_object

HELP = "the HTML report"
READS_ALL_COMPONENTS = True


def run(
    cells: str,
    out: str,
    blocks: str | None = None,
    heads: list[str] | None = None,
    claims: str | None = None,
    sweep: dict | None = None,
) -> None:
    """`sweep`: the validated config, whose searches' rounds (results/search) the page shows."""
    from mmspec.report import searches
    from mmspec.report.page import write_report

    found = searches.load(sweep) if sweep is not None else []
    datasets = (sweep or {}).get("datasets", {})
    notes = {name: entry["note"] for name, entry in datasets.items() if entry.get("note")}
    write_report(cells, out, blocks, heads, claims, found, notes)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Render the cells table (and the blocks table, and the trained heads of --heads or of "
        "the cells of --sweep) as one self-contained HTML page."
    )
    parser.add_argument("--cells", required=True)
    parser.add_argument("--blocks", default=None)
    parser.add_argument(
        "--claims", default=None, help="the claims table (mmspec claims): the scorecard, first"
    )
    heads = parser.add_mutually_exclusive_group()
    heads.add_argument("--heads", nargs="*", default=[], help="trained drafter head folders")
    heads.add_argument(
        "--sweep",
        type=json_object,
        default=None,
        help="a validated sweep config (JSON): its heads",
    )
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    heads = sweep_head_folders(args.sweep) if args.sweep is not None else args.heads
    run(args.cells, args.out, args.blocks, heads, args.claims, args.sweep)


def sweep_head_folders(sweep: dict) -> list[str]:
    """The trained-head folders of a validated sweep config's cells (results/drafters/...)."""
    from mmspec.sweep.cells import cells, drafter_dir

    return sorted({d for d in map(drafter_dir, cells(sweep)) if d})
