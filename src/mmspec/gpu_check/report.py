"""The check's table: printed aligned, written as Markdown (gpu_check/table.md) with the
failures under it."""

from __future__ import annotations

import os
from pathlib import Path

from mmspec.gpu_check.row import COLUMNS, Row


def table(rows: list[Row]) -> str:
    """The rows as one aligned text table."""
    lines = [list(COLUMNS)] + [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    text = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in text)


def markdown(rows: list[Row], header: list[str]) -> str:
    """The rows as a Markdown table, with the header lines and the failures under it."""
    out = [*header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(v.replace("|", "/") for v in row.cells()) + " |" for row in rows]
    failures = [f"- {row.cell}: {row.status}: {row.why}" for row in rows if row.failed]
    return "\n".join(out + ([""] + failures if failures else [])) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a killed run leaves no half file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def report(rows: list[Row], header: list[str], folder: Path, echo) -> int:
    """Print the table and its failures, write it to folder/table.md; the exit status."""
    failed = [row for row in rows if row.failed]
    verdict = f"{len(failed)} of {len(rows)} rows failed" if failed else f"all {len(rows)} passed"
    header = [*header, f"result: {verdict}"]
    write_atomic(folder / "table.md", markdown(rows, header))
    echo("")
    echo(table(rows))
    echo("")
    for row in failed:
        echo(f"FAIL {row.cell}: {row.status}: {row.why}")
    for line in header:
        echo(line)
    echo(f"table: {folder / 'table.md'}")
    return 1 if failed else 0
