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


def _config(config) -> dict:
    """A validated config: given, or read from config files as `snakemake --configfile` does
    (merged over the repository's default sweep where they are not a whole one)."""
    from mmspec.sweep import config as mmconfig

    if isinstance(config, dict):
        return config
    return mmconfig.load_as_snakemake(config, ROOT / "config" / "config.yaml")


def planned_cells(output: str, workdir: Path, config) -> dict[str, list]:
    """Stage -> the cells' jobs (mmspec.sweep.cell_keys.CellJob) a dry run's batches will run: the
    cells of each planned batch whose output is not up to date, or that read an output a planned job
    makes first (the batch runs after it). The cell-level view of a dry run, whose jobs are batches
    of cells; `config`: the sweep's validated config, or its config files. Where the dry run printed
    its commands (`-p`), each planned batch's spec (named by the hash of its cells' jobs) must be
    the one `config` makes: the run planned exactly these jobs."""
    from mmspec.sweep import cell_keys
    from mmspec.sweep import cells as mmcells
    from mmspec.workflow import batches

    config = _config(config)
    sweep = batches.of_sweep(config, mmcells.cells(config))
    outputs = set()
    for line in re.findall(r"^\s+output: (.+)$", output, re.M):
        outputs.update(p.strip() for p in line.split(","))
    printed = set(re.findall(r"mmspec batch --spec (\S+)", output))
    found: dict[str, list] = {}
    for stage in batches.STAGES:  # in order: a cell rerun upstream reruns what reads it
        for batch in sweep[stage].values():
            if batch.record not in outputs:
                continue
            assert not printed or batch.spec_path in printed, f"{batch.id}: other jobs planned"
            for job in batch.jobs:
                rebuilt = any(path in outputs for path in job.inputs)
                if rebuilt or not cell_keys.is_done(job, workdir / "results"):
                    found.setdefault(stage, []).append(job)
                    outputs.add(job.out)
    return found


def cell_job_counts(output: str, workdir: Path, config) -> dict[str, int]:
    """`job_counts` of a dry run with the per-cell stages counted in cells to run (the jobs
    Snakemake plans for them are batches of cells)."""
    counts = job_counts(output)
    for stage in ("generate", "judge", "score"):
        counts.pop(stage, None)
    for stage, jobs in planned_cells(output, workdir, config).items():
        counts[stage] = len(jobs)
    return counts
