"""`mmspec reference`: write the docs' reference pages (docs/reference/) from the schema, the
report's definitions, the registry and this command line, and the paper pages' claim tables."""

from __future__ import annotations

import argparse

HELP = (
    "write the docs' reference pages (docs/reference/) from the schema, the report's "
    "definitions, the registry and this command line, and the paper pages' claim tables"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Generate docs/reference/config.md, metrics.md, methods.md, cli.md, claims.md and "
        "api.md (the plugin API, from mmspec.api) from the declarations they describe, and "
        "each paper page's claim table (docs/papers/) from config/claims/. --check writes "
        "nothing and exits 1 listing the pages that differ from what the code generates now."
    )
    p.add_argument("--check", action="store_true", help="list stale pages, write nothing")


def main(args: argparse.Namespace) -> int:
    from mmspec.cli import reference

    if args.check:
        stale = reference.stale()
        for path in stale:
            print(f"stale: {path.relative_to(reference.ROOT)} (run `mmspec reference`)")
        return 1 if stale else 0
    for path in reference.write():
        print(path.relative_to(reference.ROOT))
    return 0
