"""How the tests run the workflow: Snakemake on the repository's Snakefile in a scratch
directory, and the job counts a dry run plans."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def snakemake_cmd(workdir: Path, configfile: Path, *extra: str, cores: int = 2) -> list[str]:
    """`python -m snakemake` with this repository's Snakefile, run in `workdir`."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(ROOT / "Snakefile"),
        "--cores",
        str(cores),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        *extra,
    ]


def job_counts(output: str) -> dict[str, int]:
    """Rule -> job count of the "Job stats" table Snakemake prints ("total" left out)."""
    table = output.split("Job stats:")[1]
    rows = re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)
    return {m[1]: int(m[2]) for m in rows if m[1] != "total"}
