"""`mmspec plan`: what a sweep will run before it runs: its cells, the Slurm jobs they pack into,
and the device hours they need, estimated from earlier runs of the same pairs.

The estimate is per pair: the seconds per decoded sample-turn of the pair's finished cells
(prefill and decoding of the method, its AR timing and its lossless check, as the cells' own
timings record them; model loading and warm-up not included) times the sample-turns each planned
cell decodes. A pair without finished cells has no estimate, and the plan says so.

The cost model it prints: AR is decoded once per (dataset, pair, seed, temperature), by the AR
cell; each method cell decodes its sample-turns once, plus an AR probe of each (AR's first
`timing.ar_probe_tokens` steps after the method's decode, the reference of its speedup), or AR in
full beside each under `timing.ar_reference: full`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from mmspec.data import source as dataset_source
from mmspec.planning import stage_costs
from mmspec.search.rounds import Rounds
from mmspec.sweep import cell_inputs, cell_keys
from mmspec.sweep.cells import cells as sweep_cells
from mmspec.workflow import batches

PROFILE = "slurm/config.yaml"
GROUP = "cells"  # the generate jobs' group in the slurm profile
TIMED = ["prefill_s", "decode_s", "ar_prefill_s", "ar_decode_s", "check_s"]
REFERENCE = ["ar_prefill_s", "ar_decode_s"]  # a method cell's AR probes (an AR cell: its own)
EARLIER_CELLS = 100  # finished cells a pair's estimate reads at most


@dataclass
class PairPlan:
    cells: int = 0
    done: int = 0
    ar_to_run: int = 0  # of the cells to run, AR cells (each a Slurm job of its own)
    sample_turns: int | None = 0  # of the cells to run; None where a dataset's size is unknown
    seconds_per_turn: float | None = None  # from earlier cells of the pair
    earlier_cells: int = 0
    devices: set[str] = field(default_factory=set)
    # of the earlier method cells' decoding time: their AR timing (probes, or full AR decodes)
    reference_share: float | None = None

    @property
    def hours(self) -> float | None:
        if self.seconds_per_turn is None or self.sample_turns is None:
            return None
        return self.seconds_per_turn * self.sample_turns / 3600


def profile_file(profile: str | Path = PROFILE) -> Path:
    """A Slurm profile's config file: the file, or `config.yaml` in a profile folder (as
    `snakemake --profile` takes it); ValueError naming what is not there."""
    path = Path(profile)
    if path.is_dir():
        path = path / "config.yaml"
    if not path.is_file():
        raise ValueError(
            f"--profile {profile}: no Slurm profile there (a profile folder holding config.yaml, "
            "or the file itself, e.g. slurm/config.yaml of the repository)"
        )
    return path


def group_size(profile: str | Path = PROFILE) -> int | None:
    """The slurm profile's `group-components` of the generate jobs' group (None: not packed, or
    no such file)."""
    path = Path(profile)
    if not path.is_file():
        return None
    entries = (yaml.safe_load(path.read_text()) or {}).get("group-components") or []
    for entry in [entries] if isinstance(entries, str) else entries:
        name, _, size = str(entry).partition("=")
        if name.strip() == GROUP:
            return int(size)
    return None


def _sample_turns(cfg: dict, dataset: str, results: Path, pilot: Path | None) -> int | None:
    """Sample-turns a cell of `dataset` decodes: the prepared table's rows when it exists, else
    what its source knows before preparing (a toy dataset's rows as prepare would write them),
    else, from a pilot's prepared table of it, its turns per sample times the samples its entry
    asks for (its source's `size_key`, e.g. an HF dataset's `limit`: at most that many), else
    unknown (an HF dataset not prepared yet)."""
    prepared = results / "prepared" / f"{dataset}.parquet"
    if prepared.is_file():
        return pq.read_metadata(prepared).num_rows
    spec = cfg["datasets"][dataset]
    source = dataset_source.of(spec)
    known = source.sample_turns(dataset, spec, cfg)
    if known is not None or pilot is None:
        return known
    piloted = pilot / "prepared" / f"{dataset}.parquet"
    wanted = source.size(dataset, spec)
    if not piloted.is_file() or not wanted:
        return None
    turns = pq.read_table(piloted, columns=["turn"]).column("turn").to_pylist()
    samples = sum(1 for t in turns if t == 0)
    return round(len(turns) / samples * wanted) if samples else None


def _timed(path: Path) -> tuple[float, int, set[str], float, bool]:
    """(seconds its own timings account for, sample-turns, devices, seconds of its AR timing,
    whether it is an AR cell) of a finished cell's samples table."""
    present = set(pq.read_schema(path).names)
    timed = [c for c in TIMED if c in present]
    table = pq.read_table(path, columns=[*timed, "device", "registry_method"])
    own_ar = table.column("registry_method")[0].as_py() == "ar" if table.num_rows else False
    if own_ar:  # an AR cell's AR timing is its own decode, already counted
        timed = [c for c in timed if c not in REFERENCE]
    spent = {c: sum(x for x in table.column(c).to_pylist() if x) for c in timed}
    devices = {d for d in table.column("device").to_pylist() if d}
    reference = sum(spent.get(c, 0.0) for c in REFERENCE)
    return sum(spent.values()), table.num_rows, devices, reference, own_ar


def _earlier(results: Path, pair: str) -> tuple[float | None, int, set[str], float | None]:
    """(seconds per sample-turn, cells read, devices, the share of the method cells' seconds
    that their AR timing took) of the finished cells of `pair`: at most EARLIER_CELLS of them,
    evenly spread, so a sweep of 100 000 done cells plans in seconds."""
    seconds, turns, cells, devices = 0.0, 0, 0, set()
    reference = method_seconds = 0.0
    finished = sorted(results.glob(f"generate/dataset=*/pair={pair}/*/*/*/samples.parquet"))
    for path in finished[:: max(1, math.ceil(len(finished) / EARLIER_CELLS))]:
        total, rows, used, ar_timing, own_ar = _timed(path)
        seconds += total
        turns += rows
        cells += 1
        devices.update(used)
        if not own_ar:
            reference += ar_timing
            method_seconds += total
    share = reference / method_seconds if method_seconds else None
    return (seconds / turns if turns else None), cells, devices, share


@dataclass
class Plan:
    """What `mmspec plan` prints: per pair its cells and their decoding time, per stage its
    jobs and their device time and disk (`stage_costs`)."""

    pairs: dict[str, PairPlan]
    stages: dict[str, stage_costs.StageCost]
    source: Path  # the results folder the estimates come from
    ar_batches: int = 0  # generate jobs to run (mmspec.workflow.batches) of AR cells
    method_batches: int = 0  # and of method cells
    batch_cells: int = 1
    searches: list[str] = field(default_factory=list)  # a line per search (its rounds' cells)


def plan(
    cfg: dict, results: str | Path = "results", cells=None, pilot: str | Path | None = None
) -> Plan:
    """Per pair, the cells of `cfg` (or the given `cells` of it), those already done, and the
    time of the rest; per stage, the jobs to run and their cost. Estimates come from the
    finished jobs under `results`, or under `pilot` (a pilot run's results folder) when given."""
    results = Path(results)
    source = Path(pilot) if pilot is not None else results
    cells = sweep_cells(cfg) if cells is None else cells
    sizes: dict[str, int | None] = {}

    def rows_of(dataset: str) -> int | None:
        if dataset not in sizes:
            sizes[dataset] = _sample_turns(cfg, dataset, results, source)
        return sizes[dataset]

    cells = list(cells)
    # a search's cells: those of the rounds proposed so far, and the points its budget has left
    rounds = Rounds(cfg, cells, {}, results=str(results), plan_batches=False)
    known = {c.path for c in cells}
    cells += [c for c in rounds.cells() if c.path not in known]
    generate = batches.of_sweep(cfg, cells)["generate"]
    job_of = {job.cell: job for b in generate.values() for job in b.jobs}
    batch_of = {job.cell: b for b in generate.values() for job in b.jobs}
    pairs: dict[str, PairPlan] = {}
    to_run = []
    batches_to_run: dict[str, bool] = {}  # batch id -> of an AR cell
    for cell in cells:
        entry = pairs.setdefault(cell.pair, PairPlan())
        entry.cells += 1
        if cell_keys.is_done(job_of[cell.path], results):
            entry.done += 1
            continue
        to_run.append(cell)
        batches_to_run[batch_of[cell.path].id] = cell.spec.method == "ar"
        entry.ar_to_run += cell.spec.method == "ar"
        size = rows_of(cell.dataset)
        known = size is not None and entry.sample_turns is not None
        entry.sample_turns = entry.sample_turns + size if known else None
    searches = []
    seeds = len(cfg["seeds"])
    for run in rounds.runs.values():
        proposed = [r for r in rounds.proposed() if r.run.id == run.id]
        left = run.search.budget - sum(len(r.points) for r in proposed)
        entry = pairs.setdefault(run.pair, PairPlan())
        entry.cells += left * seeds
        size = rows_of(run.dataset)
        known_size = size is not None and entry.sample_turns is not None
        entry.sample_turns = entry.sample_turns + left * seeds * size if known_size else None
        searches.append(
            f"search {run.search.name} on {run.dataset}, pair {run.pair}: {run.search.rounds} "
            f"rounds of up to {run.search.per_round} points x {seeds} seed(s) = "
            f"{run.search.budget * seeds} cells; {len(proposed)} round(s) proposed, "
            f"{left * seeds} cells not yet proposed (counted to run; their jobs are planned as "
            "each round is proposed)"
        )
    for name, entry in pairs.items():
        earlier = _earlier(source, name)
        entry.seconds_per_turn, entry.earlier_cells, entry.devices, entry.reference_share = earlier
    jobs = stage_costs.jobs_to_run(cfg, to_run, results, rows_of)
    measured = stage_costs.earlier(source, lambda path: _timed(path)[0])
    ar_batches = sum(batches_to_run.values())
    return Plan(
        pairs,
        stage_costs.cost(jobs, measured),
        source,
        ar_batches,
        len(batches_to_run) - ar_batches,
        cfg["batch_cells"],
        searches,
    )


def render(
    planned: Plan,
    packed: int | None,
    merged: int = 0,
    timing: dict | None = None,
    profile: str | Path = PROFILE,
) -> str:
    """The plan as the lines `mmspec plan` prints (`merged`: grid points that decode what another
    point's cell decodes, run once; `timing`: the config's, for the cost model)."""
    pairs = planned.pairs
    total = sum(p.cells for p in pairs.values())
    to_run = sum(p.cells - p.done for p in pairs.values())
    ar, method = planned.ar_batches, planned.method_batches
    batched = f"{ar + method} generate jobs of up to {planned.batch_cells} cells each (batch_cells)"
    if packed:
        jobs = (
            f"{batched} -> {math.ceil(method / packed) + ar} Slurm jobs: {ar} of AR cells on "
            f"their own, the method cells' packed {packed} to a Slurm job ({profile})"
        )
    else:
        jobs = f"{batched}, each a Slurm job (no `{GROUP}` group in {profile})"
    if planned.searches:
        jobs += " (a search's cells not yet proposed join as its rounds are: below)"
    lines = [f"cells: {total} ({total - to_run} done, {to_run} to run) -> {jobs}"]
    if merged:
        lines.append(f"  {merged_line(merged)}")
    lines += [f"  {line}" for line in planned.searches]
    known, estimated, unknown = 0.0, 0, 0
    for name, p in sorted(pairs.items()):
        line = f"  pair {name}: {p.cells} cells, {p.cells - p.done} to run"
        if p.cells > p.done:
            line += "; " + _estimate(p)
            known += p.hours or 0.0
            estimated += p.hours is not None
            unknown += p.hours is None
        if p.reference_share is not None:
            line += (
                f"; {p.reference_share:.0%} of its earlier method cells' decoding time was "
                "the AR timing their speedups compare with (AR probes; full AR decodes under "
                "ar_reference: full)"
            )
        lines.append(line)
    lines.append(_total(known, estimated, unknown))
    timing = timing or {}
    if timing.get("ar_reference") == "full":
        reference = "AR's whole decode of each beside it for its speedup (ar_reference: full)"
    else:
        steps = timing.get("ar_probe_tokens", "timing.ar_probe_tokens")
        reference = f"an AR probe of each for its speedup (AR's first {steps} steps)"
    lines.append(
        "cost model: AR decodes each sample-turn once per dataset, pair, seed and temperature "
        f"(the AR cell); a method cell decodes each once, plus {reference}"
    )
    lines.extend(stage_costs.render(planned.stages, str(planned.source)))
    return "\n".join(lines)


def _total(hours: float, estimated: int, unknown: int) -> str:
    """The plan's last line: the device-hours of the pairs with an estimate, and how many have
    none (never a zero that reads as free)."""
    if not estimated and not unknown:
        return "estimated: nothing to run"
    if not estimated:
        return (
            f"estimated: no estimate: {_pairs(unknown)} to run, none with finished cells under "
            "--results to time (a short run of a few samples per pair there gives one)"
        )
    line = (
        f"estimated: {stage_costs.device_time(hours * 3600)} for the {_pairs(estimated)} "
        "with an estimate "
        "(decoding only: model loading and warm-up add per cell)"
    )
    return line + (f"; {unknown} more without one" if unknown else "")


def _pairs(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def _estimate(p: PairPlan) -> str:
    if p.seconds_per_turn is None:
        return "no earlier run of this pair, no estimate"
    if p.hours is None:
        return "a dataset's size is unknown until it is prepared, no estimate"
    device = ", ".join(sorted(p.devices)) or "unknown device"
    return (
        f"about {stage_costs.device_time(p.hours * 3600)} on {device} "
        f"({p.seconds_per_turn:.3f} s per "
        f"sample-turn over {p.earlier_cells} earlier cells)"
    )


def pilot_override(cfg: dict, samples: int) -> tuple[dict, list[str]]:
    """The partial config capping each dataset the cells read (their own, and those their heads
    learn from) at `samples` samples through its source's `size_key`; and the datasets whose
    source declares none (they run whole)."""
    datasets, whole = {}, []
    for name in cell_inputs.datasets_read(sweep_cells(cfg)):
        entry = cfg["datasets"][name]
        source = dataset_source.of(entry)
        if source.size_key is None:
            whole.append(name)
            continue
        current = source.size(name, entry)
        datasets[name] = {source.size_key: samples if current is None else min(current, samples)}
    return {"datasets": datasets}, whole


def pilot_text(override: dict, configs: list[str], samples: int) -> str:
    """The pilot's partial config as a YAML file, saying how it is used."""
    files = " ".join(configs)
    header = (
        f"# A pilot of {files}: at most {samples} samples per dataset (mmspec pilot).\n"
        f"#   snakemake --cores all --directory pilot --configfile {files} pilot.yaml\n"
        f"#   mmspec plan {files} --pilot pilot/results\n"
    )
    return header + yaml.safe_dump(override, sort_keys=False)


def merged_line(merged: int) -> str:
    """How `mmspec cells` and `mmspec plan` say that grid points were merged."""
    points = "grid point" if merged == 1 else "grid points"
    return (
        f"{merged} {points} merged into the cells of others: their components read the same "
        "values (they differ only in keys such as `keep` that their views, tree and rule never "
        "read)"
    )
