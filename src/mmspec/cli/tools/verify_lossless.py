"""`mmspec verify-lossless`: prove methods lossless on tiny random models by exact enumeration."""

from __future__ import annotations

import argparse

from mmspec.sweep.arguments import json_object

HELP = "prove methods lossless on tiny random models by exact enumeration"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "For every registry method with a lossless acceptance rule (or those named), build tiny "
        "random target and draft models from --seed (8-token vocabulary) and compute EXACTLY, by "
        "enumerating every draft draw and acceptance outcome, the distribution of the first "
        "tokens at temperature 1; compare it with the target's own (total variation) and the "
        "greedy output with AR's. Each method's line ends ok, FAIL, UNTESTED (it never drafted: "
        "nothing of it was checked) or LOSSY (its rule is lossy by declaration, e.g. lvspec, "
        "fly, random_relax: measured the same way, a distance expected, never a failure). Exits "
        "1 if a method declared lossless has a TVD above 1e-9, a greedy output that differs from "
        "AR's, or is UNTESTED; 0 otherwise (LOSSY lines included)."
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", action="append", help="a registry method (repeatable)")
    p.add_argument(
        "--spec",
        type=json_object,
        default={},
        help="values for the methods (JSON), as a sweep's method entry holds them: "
        "hyperparameters, or a component swapped in by its key (drafter, tree, acceptance, views)",
    )
    p.add_argument(
        "--tokens", type=int, default=2, help="tokens after the prefill's first (default 2)"
    )


def main(args: argparse.Namespace) -> int:
    import torch

    from mmspec.methods import verify

    if args.tokens < 1:
        raise ValueError("--tokens must be >= 1")
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    return 0 if verify.run(args.seed, args.method, args.spec, args.tokens) else 1
