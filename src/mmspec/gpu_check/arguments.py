"""The command line of `mmspec gpu-check` and `python -m mmspec.gpu_check`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from mmspec.gpu_check.check import run
from mmspec.gpu_check.settings import PARTS, TIE_ULPS, Settings

DESCRIPTION = (
    "`mmspec gpu-check`: one command that checks a machine with a GPU end to end "
    "(docs/gpu-check.md)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's options (`mmspec gpu-check` and `python -m mmspec.gpu_check`)."""
    p.add_argument(
        "--out", help="the run's folder (default: gpu-check, or gpu-check-quick with --quick)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the check's smoke run: the tiny sweep (tests/configs/tiny.yaml) with "
        "config/gpu_check_quick.yaml, few benchmark and dtype samples (about a minute on 2 CPU "
        "cores)",
    )
    p.add_argument("--config", help="the sweep (default: config/config.yaml, the tour)")
    p.add_argument(
        "--sampled",
        help="the sampled cells merged into the sweep (default: config/gpu_check.yaml); "
        "'none' for none",
    )
    p.add_argument("--cores", default="all", help="Snakemake's --cores (default: all)")
    p.add_argument(
        "--skip", action="append", default=[], choices=PARTS, help="leave a part out (repeatable)"
    )
    p.add_argument("--bench-samples", type=int, help="captions the benchmark decodes (20)")
    p.add_argument("--dtype-samples", type=int, help="samples per dtype check (12)")
    p.add_argument(
        "--tie-ulps",
        type=float,
        help=f"how close (units in the last place) AR's best two logits must be for a "
        f"low-precision flip to count as rounding (default {TIE_ULPS:g})",
    )


def out_of(args: argparse.Namespace) -> str:
    """The run's folder: the quick run has its own, so that it never retrains the tour's models."""
    return args.out or ("gpu-check-quick" if args.quick else "gpu-check")


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings the parsed options ask for."""
    settings = Settings.quick() if args.quick else Settings()
    given = {
        "config": args.config and Path(args.config),
        "cores": args.cores,
        "bench_samples": args.bench_samples,
        "dtype_samples": args.dtype_samples,
        "tie_ulps": args.tie_ulps,
    }
    settings = replace(settings, **{k: v for k, v in given.items() if v is not None})
    if args.sampled:
        settings.sampled = None if args.sampled == "none" else Path(args.sampled)
    settings.parts = tuple(p for p in PARTS if p not in args.skip)
    return settings


def from_args(args: argparse.Namespace) -> int:
    """Run the check as its command line asks; the exit status."""
    return run(out_of(args), settings_of(args))


def main(argv: list[str] | None = None) -> int:
    """`python -m mmspec.gpu_check`: a bad config or folder is one line, exit status 1."""
    parser = argparse.ArgumentParser(prog="mmspec gpu-check", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return from_args(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"mmspec gpu-check: error: {error}", file=sys.stderr)
        return 1
