"""Stage claims: each paper's claims (config/claims/) checked on the cells of one or more
results folders -> results/summary/claims.parquet; `text` words the scorecard for a terminal.

The workflow runs it on the sweep's cells table after aggregation; `mmspec claims RESULTS...`
runs it by hand over several folders (toy seeds, reruns), pooling each claim's sets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa

from mmspec.claims import claim as claims_file
from mmspec.claims import scorecard
from mmspec.storage.tables import CLAIMS, write_table

HELP = (
    "check each paper's claims (config/claims/) on finished sweeps: holds / fails / "
    "inconclusive / not applicable, with the numbers"
)


def run(inputs: list[str], out: str | None = None, folder: str | Path | None = None):
    """Check every claim on the cells of `inputs` (results folders or cells files); write the
    rows to `out` (CLAIMS) when given; the rows."""
    claims = claims_file.load(Path(folder) if folder else claims_file.CLAIMS_DIR)
    table = scorecard.evaluate(claims, scorecard.read_runs(inputs))
    if out is not None:
        write_table(pa.Table.from_pandas(table, schema=CLAIMS, preserve_index=False), out, CLAIMS)
    return table


def text(table, verbose: bool = True) -> str:
    """The scorecard in words: per claim its verdict over its sets and, with `verbose`, each
    set's numbers; the harness checks apart; then the count of the papers' claims by verdict."""
    claims = scorecard.summary(table)
    harness = claims["harness"].astype(bool) if len(claims) else []
    runs = sorted({r for r in table["run"] if r})
    lines = _claim_lines(claims[~harness] if len(claims) else claims, runs, verbose)
    if len(claims) and harness.any():
        lines.append(
            "harness checks (identities of mmspec itself, not counted among the papers' claims):"
        )
        lines += _claim_lines(claims[harness], runs, verbose)
        tally = scorecard.counts(table, harness=True)
        lines.append("harness checks: " + ", ".join(f"{n} {v}" for v, n in tally.items()))
    counts = scorecard.counts(table)
    lines.append("claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    return "\n".join(lines)


def _claim_lines(claims, runs: list[str], verbose: bool) -> list[str]:
    lines = []
    for _, row in claims.iterrows():
        sets = row["sets"]
        tally = ", ".join(
            f"{row[f'n_{v}']} {v}" for v in ("holds", "fails", "inconclusive") if row[f"n_{v}"]
        )
        notes = [f"{tally} of {sets} sets"] if sets > 1 else []
        if row["n_holds_by_points"] != row["n_holds"]:
            notes.append(f"by the points alone, {row['n_holds_by_points']} of {sets} hold")
        over = f" ({'; '.join(notes)})" if notes else ""
        name = f"{row['paper']}/{row['claim_id']}"
        lines.append(f"{row['verdict'].upper():>14}  {name}: {row['claim']}{over}")
        lines.append(f"{'':16}the paper, {row['where']}: {row['paper_numbers']}")
        if verbose:
            for _, one in row["rows"].iterrows():
                where = f"{one['run']} · " if len(runs) > 1 else ""
                what = f"{where}{one['set']}: " if one["set"] else ""
                verdict = one["verdict"]
                if one["by_points"] != verdict:
                    verdict += f" (by the points alone: {one['by_points']})"
                lines.append(f"{'':16}{what}{verdict}: {one['measured']}")
        if row["verdict"] != "holds" and row["shown_by"]:
            lines.append(f"{'':16}studied in full by config/presets/{row['shown_by']}.yaml")
    return lines


def finished(
    claims: str | Path, report: str | Path, cells: str | Path = "results/summary/cells.parquet"
) -> str:
    """What the end of a run says: greedy cells of lossless rules with real divergences from AR
    (a bug, said first), the claims by verdict and where the report is (each only when the run
    wrote it)."""
    import pandas as pd

    from mmspec.report.cells import lossless_bug

    lines = []
    if Path(cells).exists():
        table = pd.read_parquet(cells)
        bugs = [r for r in table.to_dict("records") if lossless_bug(r)]
        if bugs:
            named = ", ".join(
                f"{r['dataset']}/{r['pair']}/{r['method']}/{r['hp']}" for r in bugs[:5]
            )
            more = f" and {len(bugs) - 5} more" if len(bugs) > 5 else ""
            lines.append(
                f"mmspec lossless: {len(bugs)} greedy cell(s) of a lossless rule leave AR beyond "
                f"rounding (real divergences, a bug): {named}{more}"
            )
    if Path(claims).exists():
        table = pd.read_parquet(claims)
        counts = scorecard.counts(table)
        lines.append("mmspec claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
        harness = scorecard.counts(table, harness=True)
        if any(harness.values()):
            lines.append(
                "mmspec harness checks: " + ", ".join(f"{n} {v}" for v, n in harness.items())
            )
    if Path(report).exists():
        lines.append(f"mmspec report: {Path(report).resolve()}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check every claim of config/claims/*.yaml on the cells of the given results folders (or "
        "cells.parquet files), each folder's sets apart, and print the scorecard: per claim its "
        "verdict over all sets (holds where every set holds, fails where every set fails, not "
        "applicable where no set has its cells, else inconclusive; an undecided set also gives "
        "the points' reading) and each set's numbers; harness checks apart. The claims files' "
        "format: docs/reference/claims.md."
    )
    parser.add_argument("results", nargs="+", help="results folders (or cells.parquet files)")
    parser.add_argument("--out", default=None, help="also write the rows here (Parquet)")
    parser.add_argument(
        "--claims", default=None, help="a folder of claims files (default: config/claims)"
    )
    parser.add_argument(
        "--brief", action="store_true", help="verdicts only, not each set's numbers"
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="the verdicts as a Markdown table (one row per claim, the sets' tally beside it)",
    )


def main(args: argparse.Namespace) -> None:
    table = run(args.results, args.out, args.claims)
    if args.out is not None:  # on stderr: stdout may be a table piped elsewhere
        print(f"mmspec claims: {len(table)} rows written to {args.out}", file=sys.stderr)
    if args.markdown:
        from mmspec.claims import pages

        print(pages.verdicts({"verdict": table}))
    else:
        print(text(table, verbose=not args.brief))
