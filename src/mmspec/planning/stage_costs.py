"""The jobs of each stage a sweep still has to run, and what they will cost in device time and
disk, from the jobs of an earlier run (the same sweep's, or a pilot's: `mmspec pilot`).

Each job of a device stage (cache_visual, caption, train_drafter, generate) leaves a Snakemake
benchmark file, `results/benchmarks/<stage>/...tsv`: its wall seconds, loading and warm-up
included. A job to run is costed from the earlier jobs of its stage that used the same model
(cache_visual, caption) or pair (train_drafter, generate):

- generate: the pair's seconds per decoded sample-turn (`plan`) times the cell's sample-turns,
  plus the pair's earlier jobs' seconds outside decoding (loading, warm-up) once per job;
- cache_visual and caption: the earlier jobs' seconds per dataset row times the job's rows,
  loading included in each row's share, so an upper bound where the earlier jobs were short;
- train_drafter: the earlier jobs' seconds per job: the same optimisation steps on no more data
  (a pilot's: less), so a lower bound.

Disk: the bytes per row (per job for a trained head) of the earlier jobs' outputs, prepared
tables included, times the rows to come: an upper bound from a pilot's small files, whose fixed
overhead each row's share carries. A job whose stage has no earlier job of its model or
pair has no estimate, and the plan says how many.
"""

from __future__ import annotations

import csv
import functools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from mmspec import commands
from mmspec.hub.cache import size_text
from mmspec.storage import integrity
from mmspec.sweep import cell_inputs

BENCHMARKS = "benchmarks"
# the input keys of a generate job (cell_inputs) -> the stage writing that input, in the order
# the pipeline runs them
INPUT_STAGE = {
    "prepared": "prepare",
    "target_visual": "cache_visual",
    "draft_visual": "cache_visual",
    "captions": "caption",
    "drafter": "train_drafter",
}
STAGES = (*dict.fromkeys(INPUT_STAGE.values()), "generate")  # what a cell's decode costs
# those running models on a device: the stages whose modules declare GPU = True
DEVICE_STAGES = tuple(s for s in STAGES if commands.stage(s).gpu)


@dataclass(frozen=True)
class Job:
    """A job to run: its stage, what its cost depends on (`key`: a model slug or a pair), its
    output (relative to the results folder) and the dataset rows it reads (None: unknown)."""

    stage: str
    key: str
    output: str
    rows: int | None


@dataclass
class Earlier:
    """An earlier run's jobs of one stage and key: wall seconds, rows, output bytes, and (for
    generate) the seconds the cells' own timings account for."""

    jobs: int = 0
    seconds: float = 0.0
    rows: int = 0
    bytes: int = 0
    timed: float = 0.0


@dataclass
class StageCost:
    """A stage's jobs to run and their estimated cost."""

    jobs: int = 0
    estimated: int = 0  # of `jobs`, those with an earlier job to cost them from
    seconds: float = 0.0
    bytes: float = 0.0
    sized: int = 0  # of `jobs`, those with a disk estimate
    reasons: set[str] = field(default_factory=set)


def _under_results(path: str) -> str:
    """A workflow path ("results/x") relative to the results folder ("x")."""
    return path.split("/", 1)[1]


def _key(stage: str, output: str) -> str:
    """What a job's cost depends on, read from its output path: the dataset (prepare), the
    model's slug (cache_visual, caption: results/<folder>/<model>/<dataset>.parquet), the pair
    (train_drafter: results/drafters/<pair>/...)."""
    parts = Path(output).parts
    return {"prepare": Path(output).stem, "train_drafter": parts[2]}.get(stage, parts[-2])


def jobs_to_run(cfg: dict, cells, results: Path, rows_of) -> list[Job]:
    """The jobs of every stage that the cells to run (`cells`: those not up to date under
    `results`, mmspec.workflow.batches) need and whose outputs are missing; `rows_of(dataset)`: its
    sample-turns, or None."""
    jobs: dict[str, Job] = {}

    def add(stage: str, output: str, rows: int | None, key: str | None = None) -> None:
        relative = _under_results(output)
        if relative not in jobs and not _whole(results / relative):
            jobs[relative] = Job(stage, key or _key(stage, output), relative, rows)

    for cell in cells:
        output = cell_inputs.samples_path(cell)
        relative = _under_results(output)
        jobs[relative] = Job("generate", cell.pair, relative, rows_of(cell.dataset))
        for name, path in cell_inputs.generate_inputs(cfg, cell).items():
            stage = INPUT_STAGE.get(name)
            if stage == "train_drafter":  # the head, and what it learns from
                data = cell_inputs.head_data(cell)
                for head_name, head_path in cell_inputs.head_inputs(cfg, cell).items():
                    if head_name in INPUT_STAGE:
                        add(INPUT_STAGE[head_name], head_path, rows_of(data))
                add(stage, path, None)
            elif stage is not None:
                add(stage, path, rows_of(cell.dataset))
    return list(jobs.values())


def _whole(output: Path) -> bool:
    """The output is there and not damaged (the workflow rebuilds a damaged one)."""
    return output.exists() and integrity.problem(output) is None


def _wall_seconds(tsv: Path) -> float:
    with tsv.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return sum(float(r["s"]) for r in rows) / max(1, len(rows))


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _rows(path: Path) -> int | None:
    return pq.read_metadata(path).num_rows if path.is_file() else None


def earlier(folder: Path, timed_of) -> dict[tuple[str, str], Earlier]:
    """(stage, key) -> the jobs of the run whose results folder is `folder`;
    `timed_of(samples_path)`: the seconds a generate cell's own timings account for."""
    found: dict[tuple[str, str], Earlier] = defaultdict(Earlier)
    prepared_rows = functools.cache(
        lambda dataset: _rows(folder / "prepared" / f"{dataset}.parquet")
    )
    bench = folder / BENCHMARKS
    for tsv in sorted(bench.glob("*/**/*.tsv")):
        parts = tsv.relative_to(bench).with_suffix("").parts
        stage = parts[0]
        if stage == "generate":
            output = folder / "generate" / Path(*parts[1:]) / "samples.parquet"
            key = re.sub(r"^pair=", "", parts[2])
            rows = _rows(output)
        elif stage in ("cache_visual", "caption") and len(parts) == 3:
            output = folder / ("visual" if stage == "cache_visual" else "captions")
            output = output / parts[1] / f"{parts[2]}.parquet"
            key, rows = parts[1], prepared_rows(parts[2])
        elif stage == "train_drafter" and len(parts) == 4:
            output, key, rows = folder / "drafters" / Path(*parts[1:]), parts[1], None
        else:
            continue
        if not output.exists():
            continue
        entry = found[(stage, key)]
        entry.jobs += 1
        entry.seconds += _wall_seconds(tsv)
        entry.rows += rows or 0
        entry.bytes += _size(output)
        if stage == "generate":
            entry.timed += timed_of(output)
    for prepared in sorted(folder.glob("prepared/*.parquet")):
        entry = found[("prepare", prepared.stem)]
        entry.jobs += 1
        entry.rows += _rows(prepared) or 0
        entry.bytes += _size(prepared)
    return found


def cost(jobs: list[Job], measured: dict[tuple[str, str], Earlier]) -> dict[str, StageCost]:
    """Per stage, the jobs to run and their cost from `measured` (see the module's text)."""
    costs = {stage: StageCost() for stage in STAGES}
    prepare_bytes_per_row = _pooled(measured, "prepare")
    for job in jobs:
        stage = costs[job.stage]
        stage.jobs += 1
        past = measured.get((job.stage, job.key))
        if job.stage == "prepare":  # the dataset's own bytes per row, else all datasets'
            rate = past.bytes / past.rows if past and past.rows else prepare_bytes_per_row
            if rate is not None and job.rows is not None:
                stage.bytes += rate * job.rows
                stage.sized += 1
            continue
        if past is None or not past.jobs:
            stage.reasons.add(f"no earlier {job.stage} job of {job.key}")
            continue
        if job.stage == "train_drafter":
            stage.estimated += 1
            stage.seconds += past.seconds / past.jobs
            stage.bytes += past.bytes / past.jobs
            stage.sized += 1
            continue
        if job.rows is None or not past.rows:
            stage.reasons.add(f"rows of a {job.stage} job unknown until its dataset is prepared")
            continue
        stage.estimated += 1
        stage.sized += 1
        stage.bytes += past.bytes / past.rows * job.rows
        if job.stage == "generate":
            outside = max(0.0, past.seconds - past.timed) / past.jobs  # loading, warm-up
            stage.seconds += outside + past.timed / past.rows * job.rows
        else:
            stage.seconds += past.seconds / past.rows * job.rows
    return costs


def _pooled(measured: dict[tuple[str, str], Earlier], stage: str) -> float | None:
    rows = sum(e.rows for (s, _), e in measured.items() if s == stage)
    size = sum(e.bytes for (s, _), e in measured.items() if s == stage)
    return size / rows if rows else None


# how an estimate bounds the truth: loading is counted in each row's share (an upper bound
# where the earlier jobs read fewer rows); a head's job is costed as the earlier one's, whose
# data was no larger (a pilot's: smaller; its optimisation steps are the same)
BOUND = {"cache_visual": "at most ", "caption": "at most ", "train_drafter": "at least "}


def device_time(seconds: float) -> str:
    """Device time in hours, with minutes beside a value under an hour (0.00 hides minutes)."""
    hours = f"{seconds / 3600:.2f} device-hours"
    return hours if seconds >= 3600 else f"{hours} ({seconds / 60:.1f} min)"


def render(costs: dict[str, StageCost], source: str) -> list[str]:
    """The plan's per-stage lines (`source`: the results folder the estimates come from)."""
    lines = [
        f"per stage, the jobs to run (device-hours and disk from the earlier jobs in {source}):"
    ]
    hours = 0.0
    disk = 0.0
    for name in STAGES:
        stage = costs.get(name, StageCost())
        if not stage.jobs:
            lines.append(f"  {name}: nothing to run")
            continue
        # generate's are cells (its jobs run them in batches: the plan's first line)
        unit = "cell" if name == "generate" else "job"
        parts = [f"{stage.jobs} {unit}" + ("s" if stage.jobs != 1 else "")]
        if name in DEVICE_STAGES:
            if stage.estimated:
                parts.append(f"{BOUND.get(name, '')}{device_time(stage.seconds)}")
                if stage.estimated < stage.jobs:
                    parts[-1] += f" for {stage.estimated} of them"
                hours += stage.seconds / 3600
            else:
                parts.append("no estimate")
        if stage.sized:
            # a small file's fixed overhead (Parquet footer, schema) counted in each row's share:
            # row-scaled disk from a pilot's few rows is an upper bound
            bound = "about" if name == "train_drafter" else "at most"
            parts.append(f"disk {bound} {size_text(stage.bytes)}")
            disk += stage.bytes
        line = f"  {name}: " + ", ".join(parts)
        if stage.reasons:
            line += f" ({'; '.join(sorted(stage.reasons))})"
        lines.append(line)
    estimated = any(costs.get(n, StageCost()).estimated for n in DEVICE_STAGES)
    sized = any(costs.get(n, StageCost()).sized for n in STAGES)
    if not any(costs.get(n, StageCost()).jobs for n in STAGES):
        lines.append("  all stages: nothing to run")
    elif not estimated and not sized:
        lines.append(
            "  all stages: no estimate (no earlier jobs to cost them from: run a pilot, "
            "`mmspec pilot`, and plan with --pilot)"
        )
    else:
        device = device_time(hours * 3600) if estimated else "no device-hours estimate"
        lines.append(
            f"  all stages: {device} and {size_text(disk)} of outputs where estimated (the "
            "models and datasets themselves: `mmspec fetch --list`)"
        )
    return lines
