"""Cell batches: the jobs of the per-cell stages (generate, judge, score).

Snakemake spends about a millisecond on every job it plans, whatever the job does, so a job per
cell and stage made a 100 000-cell sweep cost minutes before its first job (docs/performance.md,
"The DAG at 100 000 cells"). The per-cell stages therefore run in batches: a batch is up to
`batch_cells` cells of one dataset, pair, method and seed (its grid points, in order), and one
job per stage runs them one after another (`mmspec batch`), each cell exactly as its own
`mmspec <stage>` command line would, its log and benchmark files where they always were.

Each cell keeps Snakemake's rerun rules on its own (`mmspec.sweep.cell_keys`). A cell's key file
(`results/keys/<stage>/<cell>.json`) holds a hash of what decided it, as Snakemake's rerun
triggers see it: the job's arguments, its code fingerprint (plugins included) and its input
files (path, size and modification time), bound to the output's own size and modification
time. A batch job reruns a cell only when that key differs or the output is missing or damaged,
so a changed parameter, code or input reruns exactly the cells it touches, whichever batch they
share.

A batch's spec (`results/batches/<stage>/<batch>/spec-<hash>.json`) lists its cells' jobs; the
workflow writes it when its jobs start (a dry run writes nothing), named by its content's hash,
which is also the job's `params`, so Snakemake reruns a batch whose cells' jobs changed. The
batch's record (`done.json`, its output) lists the outputs it left with their sizes and times:
before planning, a record whose outputs were since deleted, cut or replaced is removed, so the
same command line reruns the batch (`stale_records`), and with it what depends on it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from mmspec.data import source as dataset_source
from mmspec.models import footprint
from mmspec.models import source as model_source
from mmspec.scoring import metric_catalog
from mmspec.storage import durable
from mmspec.sweep import cell_inputs
from mmspec.sweep import cells as mmcells
from mmspec.sweep.cell_keys import CellJob, size_and_time
from mmspec.sweep.config_checks import dataset_judge, dataset_task
from mmspec.workflow.fingerprint import fingerprint

STAGES = ("generate", "judge", "score")
FOLDER = "results/batches"
RECORD = "done.json"
JUDGE_CACHE_DIR = "results/judge/cache"
# Batch ids are folders: dataset=<d>/pair=<p>/method=<m>/seed=<s>/part-<k> (a searched round's
# own cells: .../seed=<s>/round-<r>-part-<k>, mmspec.search.rounds)
ID_PATTERN = r"dataset=[^/]+/pair=[^/]+/method=[^/]+/seed=\d+/(?:round-\d+-)?part-\d+"


@dataclass
class Batch:
    """One job of a per-cell stage: its cells' jobs, the files it waits for, its resources."""

    stage: str
    id: str
    jobs: list[CellJob] = field(default_factory=list)
    inputs: dict[str, None] = field(default_factory=dict)  # ordered set
    host_mb: int = 0
    gpu_mb: int = 0
    group: str | None = None

    @property
    def folder(self) -> str:
        return f"{FOLDER}/{self.stage}/{self.id}"

    @property
    def record(self) -> str:
        return record_path(self.stage, self.id)

    @functools.cached_property
    def spec_text(self) -> str:
        return json.dumps(
            {"stage": self.stage, "batch": self.id, "cells": [vars(j) for j in self.jobs]},
            separators=(",", ":"),
        )

    @functools.cached_property
    def spec_path(self) -> str:
        """Named by its content's hash: a new path (so new params) when a cell's job changes."""
        digest = hashlib.sha256(self.spec_text.encode()).hexdigest()[:16]
        return f"{self.folder}/spec-{digest}.json"


def record_path(stage: str, batch_id: str) -> str:
    return f"{FOLDER}/{stage}/{batch_id}/{RECORD}"


def _group_key(cell) -> tuple:
    return (cell.dataset, cell.pair, cell.method, cell.seed)


def partition(cells, size: int) -> dict:
    """cell path -> its batch id: the cells of one dataset, pair, method and seed, in the
    order of their grid points, split into parts of at most `size`."""
    groups: dict[tuple, list] = defaultdict(list)
    for cell in cells:
        groups[_group_key(cell)].append(cell)
    of = {}
    for (dataset, pair, method, seed), members in groups.items():
        for i, cell in enumerate(members):
            of[cell.path] = (
                f"dataset={dataset}/pair={pair}/method={method}/seed={seed}/part-{i // size}"
            )
    return of


class _Jobs:
    """Builds the cells' jobs of each stage, caching what many cells share."""

    def __init__(self, config: dict, ar_of):
        from mmspec.sweep.jobs import GenerateJob
        from mmspec.sweep.settings import ImageModels, JudgeSettings

        self.config = config
        self.ar_of = ar_of
        self.GenerateJob = GenerateJob
        self.code = {stage: fingerprint(stage) for stage in STAGES}
        self._tasks: dict[str, str] = {}
        self._metric: dict[str, str] = {}
        self._memory: dict[tuple, object] = {}
        self._image_models = (
            ImageModels.parse(config["image_metrics"]).to_json()
            if config.get("image_metrics")
            else None
        )
        self._judge_settings = (
            JudgeSettings.parse(config["judge"]).to_json() if config.get("judge") else None
        )
        self._model_code: dict[tuple, str] = {}
        self._shared: dict[tuple, tuple] = {}  # per grid point, what its seeds' jobs share

    def task(self, dataset: str) -> str:
        if dataset not in self._tasks:
            self._tasks[dataset] = dataset_task(self.config, dataset)
        return self._tasks[dataset]

    def metric(self, dataset: str) -> str:
        if dataset not in self._metric:
            spec = self.config["datasets"][dataset]
            if cell_inputs.makes_images(self.config, dataset):
                self._metric[dataset] = "image"
            else:
                self._metric[dataset] = dataset_source.of(spec).metric(dataset, spec)
        return self._metric[dataset]

    def models_code(self, refs) -> str:
        refs = tuple(refs)
        if refs not in self._model_code:
            self._model_code[refs] = model_source.plugin_code(list(refs))
        return self._model_code[refs]

    def memory(self, cell):
        """The memory a cell's generate job needs, and the models it loads."""
        point = (cell.pair, cell.method, cell.hp)
        if point not in self._memory:
            pair = self.config["pairs"][cell.pair]
            models = tuple(cell.spec.loaded_models(pair))
            toy = self.config["toy"]["models"]
            self._memory[point] = (footprint.job_memory(list(models), toy), models)
        return self._memory[point]

    def _grid_point(self, cell) -> tuple:
        """What the generate jobs of a grid point's seeds share: the job (as a dict, its seed
        set per cell), the options and files of its inputs, and its code. The cells of a
        sweep are many seeds of few grid points, so planning 100 000 of them builds each of
        these once per point (tests/test_batches.py checks the result against each cell's own)."""
        point = (cell.dataset, cell.pair, cell.method, cell.hp)
        if point not in self._shared:
            inputs = cell_inputs.generate_inputs(self.config, cell)
            job = self.GenerateJob.of_cell(self.config, cell, self.task(cell.dataset)).to_dict()
            options, files = [], [inputs["prepared"], *inputs["models"]]
            for name in ("target_visual", "draft_visual", "captions", "drafter"):
                if name in inputs:
                    options += [f"--{name.replace('_', '-')}", inputs[name]]
                    files.append(inputs[name])
            _, models = self.memory(cell)
            code = self.code["generate"] + cell.spec.plugin_code()
            code += self.models_code(ref for ref, _ in models)
            self._shared[point] = (job, inputs["prepared"], options, files, code)
        return self._shared[point]

    def generate(self, cell) -> CellJob:
        job, prepared, options, files, code = self._grid_point(cell)
        job["cell"]["seed"] = cell.seed
        argv = ["generate", "--params", json.dumps(job, sort_keys=True), "--prepared", prepared]
        argv += options
        files = list(files)
        if cell.spec.method != "ar":  # the AR cell's tokens and timings: the reference
            ar_samples = cell_inputs.samples_path(self.ar_of(cell))
            argv += ["--ar-samples", ar_samples]
            files.append(ar_samples)
        out = cell_inputs.samples_path(cell)
        argv += ["--out", out]
        return CellJob(
            cell.path,
            tuple(argv),
            out,
            f"logs/generate/{cell.path}.log",
            f"results/benchmarks/generate/{cell.path}.tsv",
            tuple(files),
            code,
        )

    def judge(self, cell) -> CellJob:
        samples = cell_inputs.samples_path(cell)
        prepared = cell_inputs.prepared_path(cell.dataset)
        out = cell_inputs.judgements_path(cell)
        argv = (
            "judge", "--samples", samples, "--prepared", prepared,
            "--template", dataset_judge(self.config, cell.dataset),
            "--settings", self._judge_settings, "--cache", JUDGE_CACHE_DIR, "--out", out,
        )  # fmt: skip
        return CellJob(
            cell.path, argv, out, f"logs/judge/{cell.path}.log", None,
            (samples, prepared), self.code["judge"],
        )  # fmt: skip

    def score(self, cell) -> CellJob:
        ar = self.ar_of(cell)
        samples = cell_inputs.samples_path(cell)
        ar_samples = cell_inputs.samples_path(ar)
        prepared = cell_inputs.prepared_path(cell.dataset)
        metric = self.metric(cell.dataset)
        models = cell_inputs.score_models(self.config, cell.dataset)
        argv = ["score", "--samples", samples, "--ar-samples", ar_samples]
        argv += ["--prepared", prepared, "--metric", metric]
        files = [samples, ar_samples, prepared, *models]
        code = self.code["score"] + metric_catalog.plugin_code(metric)
        if cell_inputs.makes_images(self.config, cell.dataset):
            argv += ["--image-models", self._image_models]
            code += self.models_code(self.config["image_metrics"].values())
        if cell_inputs.judged(self.config, cell.dataset):
            judgements = cell_inputs.judgements_path(cell)
            ar_judgements = cell_inputs.judgements_path(ar)
            argv += ["--judgements", judgements, "--ar-judgements", ar_judgements]
            files += [judgements, ar_judgements]
        out = cell_inputs.scores_path(cell)
        argv += ["--out", out]
        return CellJob(
            cell.path, tuple(argv), out, f"logs/score/{cell.path}.log", None, tuple(files), code
        )


def plan(config: dict, cells, ar_of, batch_of: dict[str, str]) -> dict[str, dict[str, Batch]]:
    """stage -> batch id -> Batch, for every per-cell stage of the cells `cells`;
    `ar_of(cell)`: the AR cell it is compared against; `batch_of`: cell path -> batch id, for
    these cells and their AR cells (`partition`)."""
    cells = list(cells)
    jobs = _Jobs(config, ar_of)
    found: dict[str, dict[str, Batch]] = {stage: {} for stage in STAGES}

    def batch(stage: str, cell) -> Batch:
        bid = batch_of[cell.path]
        if bid not in found[stage]:
            found[stage][bid] = Batch(stage, bid)
        return found[stage][bid]

    for cell in cells:
        is_ar = cell.spec.method == "ar"
        ar = None if is_ar else ar_of(cell)
        # generate: the cell's inputs but the AR cell's samples, for which its batch's record
        job = jobs.generate(cell)
        b = batch("generate", cell)
        b.jobs.append(job)
        ar_file = None if is_ar else cell_inputs.samples_path(ar)
        b.inputs.update(dict.fromkeys(f for f in job.inputs if f != ar_file))
        if not is_ar:
            b.inputs[record_path("generate", batch_of[ar.path])] = None
        memory, _ = jobs.memory(cell)
        b.host_mb = max(b.host_mb, memory.host_mb)
        b.gpu_mb = max(b.gpu_mb, memory.gpu_mb)
        # a group packs the jobs that depend on each other: one AR batch in it would pack
        # every batch of its dataset, pair and seed into one Slurm job
        b.group = None if is_ar else "cells"
        judged = cell_inputs.judged(config, cell.dataset)
        if judged:
            job = jobs.judge(cell)
            b = batch("judge", cell)
            b.jobs.append(job)
            b.inputs[cell_inputs.prepared_path(cell.dataset)] = None
            b.inputs[record_path("generate", batch_of[cell.path])] = None
        job = jobs.score(cell)
        b = batch("score", cell)
        b.jobs.append(job)
        b.inputs[cell_inputs.prepared_path(cell.dataset)] = None
        b.inputs.update(dict.fromkeys(cell_inputs.score_models(config, cell.dataset)))
        for of in (cell, ar or cell):
            b.inputs[record_path("generate", batch_of[of.path])] = None
            if judged:
                b.inputs[record_path("judge", batch_of[of.path])] = None
    return found


def records(batches: dict[str, dict[str, Batch]], stages=STAGES) -> list[str]:
    """The records of the batches of `stages`: the targets that stand for their cells."""
    return [b.record for stage in stages for b in batches[stage].values()]


def write_specs(batches: dict[str, dict[str, Batch]]) -> int:
    """Write each batch's spec where it is not yet (named by its content's hash), removing
    the batch's older specs; the number written."""
    written = 0
    for stage in STAGES:
        for b in batches.get(stage, {}).values():
            path = Path(b.spec_path)
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            durable.write_text(path, b.spec_text)
            written += 1
            for old in path.parent.glob("spec-*.json"):
                if old != path:
                    old.unlink(missing_ok=True)
    return written


def stale_records(batches: dict[str, dict[str, Batch]]) -> list[str]:
    """Remove each batch record one of whose outputs is gone or has changed since the batch
    wrote it (deleted, cut, replaced), so the run reruns the batch (which reruns that cell
    and skips the others) and what depends on it; a line per output found."""
    lines = []
    for stage in STAGES:
        for b in batches[stage].values():
            try:
                text = Path(b.record).read_text()
            except FileNotFoundError:
                continue
            try:
                outputs = json.loads(text)["outputs"]
            except (ValueError, KeyError, TypeError):
                outputs = None
            found = [] if outputs is not None else [f"{b.record}: unreadable"]
            for out, stamp in (outputs or {}).items():
                try:
                    now = size_and_time(os.stat(out))
                except FileNotFoundError:
                    found.append(f"{out}: missing")
                    continue
                if now != stamp:
                    found.append(f"{out}: changed since its job wrote it (size or time)")
            if found:
                os.unlink(b.record)
                more = f" ({len(found) - 1} more output{'s' if len(found) > 2 else ''})"
                lines.append(
                    f"mmspec: {found[0]}; its {stage} job runs again, for the cells not up to "
                    f"date{more if len(found) > 1 else ''}"
                )
    return lines


def ar_finder(config: dict, cells):
    """cell -> the AR cell it is compared against (mmspec.sweep.cells.ar_cell raises, naming it)."""
    ar_cells = {
        (c.dataset, c.pair, c.seed, c.spec.temperature): c for c in cells if c.spec.method == "ar"
    }

    def ar_of(cell):
        found = ar_cells.get((cell.dataset, cell.pair, cell.seed, cell.spec.temperature))
        return found or mmcells.ar_cell(config, cell)

    return ar_of


def of_sweep(config: dict, cells, batch_of: dict[str, str] | None = None):
    """The batches of the sweep `config` of `cells` (its `batch_cells` each at most, or as
    `batch_of` assigns them)."""
    cells = list(cells)
    batch_of = batch_of or partition(cells, config["batch_cells"])
    return plan(config, cells, ar_finder(config, cells), batch_of)
