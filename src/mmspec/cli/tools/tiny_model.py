"""`mmspec tiny-model`: save a tiny random-init model of a VLM family (offline stand-in for
rehearsals)."""

from __future__ import annotations

import argparse
import sys

HELP = "save a tiny random-init model of a VLM family (offline stand-in for rehearsals)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("family", help="one of: " + ", ".join(_families()))
    p.add_argument("out", help="the folder to save it in (model, processor, tokenizer)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vq-from", default=None, help="janus: take the VQ model of this saved one (a draft's)"
    )


def main(args: argparse.Namespace) -> None:
    from mmspec.toy import tiny

    if args.family == "janus":
        out = tiny.save_janus(args.out, args.hidden, args.layers, args.seed, args.vq_from)
    else:
        out = tiny.save(args.family, args.out, args.hidden, args.layers, args.seed)
    print(f"saved a tiny random {args.family} model -> {out}", file=sys.stderr)


def _families() -> list[str]:
    from mmspec.models.families import FAMILIES, IMAGE_GENERATORS

    return [*FAMILIES, *IMAGE_GENERATORS]
