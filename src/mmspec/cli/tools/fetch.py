"""`mmspec fetch`: list the Hub models and datasets a sweep reads, with sizes, and download them
into the Hugging Face cache, for compute nodes that run offline."""

from __future__ import annotations

import argparse

from mmspec.sweep.arguments import sweep_files

HELP = (
    "list the Hub models and datasets a sweep reads, with sizes, and download them into the "
    "Hugging Face cache, for compute nodes that run offline"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Read a config as `mmspec cells` does, list every Hugging Face Hub model and dataset its "
        "cells read (the files the jobs read and their sizes, and what the cache already holds) "
        "and the local paths they read, then download the hub ones into the Hugging Face cache "
        "(HF_HOME; HF_ENDPOINT names the Hub), so that jobs on compute nodes run offline "
        "(HF_HUB_OFFLINE=1). Exits 1 when a local path is missing."
    )
    sweep_files(p)
    p.add_argument("--list", action="store_true", help="list only, download nothing")


def main(args: argparse.Namespace) -> int:
    from mmspec.hub import cache as hub_cache
    from mmspec.planning import hub_needs
    from mmspec.sweep import config

    cfg = config.load_as_snakemake(args.config, args.default)
    repos, local = hub_needs.needed(cfg)
    if hub_needs.jobs_offline(local_execution=True):
        print(hub_needs.render_offline(repos, local))
        if repos and not args.list:
            raise ValueError(
                "HF_HUB_OFFLINE is set in this environment, so the listing above is the cache's "
                "alone: fetch on a host that reaches the Hub, with `HF_HUB_OFFLINE=0 mmspec "
                "fetch ...`"
            )
    else:
        listings = [hub_cache.listing(repo) for repo in repos]
        print(hub_needs.render(listings, local))
        if not args.list:
            for found in listings:
                if found.to_fetch or len(found.cached) < len(found.files):
                    print(f"fetching {found.repo.describe()} ...", flush=True)
                    print(f"  -> {hub_cache.fetch(found)}")
            print(f"fetched: {len(listings)} hub repositories in {hub_cache.cache_dir()}")
    missing = [path.path for path in local if not path.exists()]
    if missing:
        print(
            f"{len(missing)} local path(s) the sweep reads are missing: {', '.join(missing)} "
            "(copy them there; exit 1)"
        )
    return 1 if missing else 0
