"""`mmspec compact-judge-cache`: merge the judgement cache's shards into one (safe while judge jobs
run)."""

from __future__ import annotations

import argparse
import sys

HELP = "merge the judgement cache's shards into one (safe while judge jobs run)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("cache", nargs="?", default="results/judge/cache", help="the cache directory")
    p.add_argument(
        "--stale-temp-hours",
        type=float,
        default=24.0,
        help="remove temp files of writers killed at least this long ago",
    )


def main(args: argparse.Namespace) -> None:
    from mmspec.scoring.judge import compact

    done = compact(args.cache, stale_temp_s=args.stale_temp_hours * 3600)
    into = done.path or f"{args.cache} (nothing to merge)"
    print(
        f"merged {done.merged_files} files ({done.rows_read} rows) into {into}: "
        f"{done.rows_kept} judgements; removed {done.temp_files_removed} stale temp files",
        file=sys.stderr,
    )
