"""`mmspec gpu-check`: check a GPU machine end to end: the tour and a sampled cell of every method
family, the engine benchmark, bf16/fp16 greedy SD against AR; one table, exit 1 on any failure
(docs/gpu-check.md)."""

from __future__ import annotations

import argparse

HELP = (
    "check a GPU machine end to end: the tour and a sampled cell of every method family, the "
    "engine benchmark, bf16/fp16 greedy SD against AR; one table, exit 1 on any failure "
    "(docs/gpu-check.md)"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mmspec import gpu_check

    gpu_check.add_arguments(p)


def main(args: argparse.Namespace) -> int:
    from mmspec import gpu_check

    return gpu_check.from_args(args)
