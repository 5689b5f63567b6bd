"""The rounds of a sweep's searches: their files under results/search, and the cells they name.

A search runs on each (dataset, pair) its sweep rows give its method entry; its id is the folder
`dataset=<d>/pair=<p>/method=<m>`. Round r's file, `results/search/<id>/round-<r>.json`, holds
the search's definition and the round's points; each point is decoded at every seed of the sweep.
A point's cell is the cell another method entry's grid already holds when that cell decodes the
same thing (same dataset, pair, seed, components and values): one cell, decoded once. Otherwise it
is a cell of the searched entry, `method=<m>/hp=<slug of the values it reads>`, batched by round
(`.../seed=<s>/round-<r>-part-<k>`).

A round file counts while it and every earlier round were proposed for the search as the config
defines it now, up to the rounds its budget holds; the others are proposed again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mmspec.storage import durable
from mmspec.sweep import cells as mmcells
from mmspec.sweep.search_runs import Run, point_spec, runs
from mmspec.workflow import batches as mmbatches

FOLDER = "results/search"


@dataclass
class Round:
    """A proposed round: its points, their cells, and the batches of its new cells."""

    run: Run
    number: int
    points: list[dict]
    cells: list[mmcells.Cell]  # every point at every seed (shared cells included)
    batch_of: dict[str, str]  # cell path -> its batch (a grid's, or the round's own)
    batches: dict[str, dict[str, mmbatches.Batch]] = field(default_factory=dict)

    @property
    def score_records(self) -> list[str]:
        """The score records of its cells: what the next round, and the summary, wait for."""
        ids = dict.fromkeys(self.batch_of[c.path] for c in self.cells)
        return [mmbatches.record_path("score", b) for b in ids]


def round_id(round_: int, part: str) -> str:
    return f"round-{round_}-{part}"


def read_points(run: Run, round_: int, results: str = "results") -> list[dict] | None:
    """The points of round `round_`'s file, or None where there is none for the search as
    defined now (missing, unreadable, or proposed under another definition)."""
    try:
        data = json.loads(Path(run.round_path(round_, results)).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("search") != run.search.definition():
        return None
    if data.get("round") != round_ or not isinstance(data.get("points"), list):
        return None
    if data.get("size") != run.search.round_size(round_):
        return None  # the budget has since changed this round's size: it is proposed again
    return data["points"]


SWEEP_FILE = f"{FOLDER}/sweep.json"


def write_sweep(config: dict, runs_: dict) -> None:
    """The validated config where the round jobs read it (written as a run's jobs start: a
    file, so that the jobs' rerun triggers are only what decides a round)."""
    if not runs_:
        return
    text = json.dumps(config, sort_keys=True)
    path = Path(SWEEP_FILE)
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(path, text)


def write_round(run: Run, round_: int, points: list[dict], history: list, path: str) -> None:
    """Write a round's file atomically: its definition, its points, and what the optimizer was
    told of the earlier points (for the report)."""
    data = {
        "search": run.search.definition(),
        "round": round_,
        "size": run.search.round_size(round_),
        "points": points,
        "history": history,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(Path(path), json.dumps(data, indent=1, sort_keys=True))


class Rounds:
    """The sweep's searches and their proposed rounds, read as round files appear.

    `static`: the grid's cells; `batch_of`: their batches (cell path -> batch id);
    `plan_batches`: False where only the rounds' cells are wanted."""

    def __init__(
        self,
        config: dict,
        static,
        batch_of: dict[str, str],
        results: str = "results",
        plan_batches: bool = True,
    ):
        self.config = config
        self.results = results
        self.plan_batches = plan_batches
        self.runs = {run.id: run for run in runs(config)}
        static = list(static)
        self._shared = {(c.dataset, c.pair, c.seed, c.spec.decoding()): c for c in static}
        self._batch_of = batch_of
        self._ar_of = mmbatches.ar_finder(config, static)
        self._rounds: dict[tuple[str, int], tuple[int, Round]] = {}  # by file time
        self._own: dict[str, str] = {}  # a searched cell's path -> its round's batch
        self._batches: dict[str, dict[str, mmbatches.Batch]] = {s: {} for s in mmbatches.STAGES}

    def round(self, search_id: str, number: int) -> Round | None:
        """Round `number` of the search, when its file (and every earlier one) counts."""
        run = self.runs[search_id]
        if number > run.search.rounds:
            return None
        if number > 1 and self.round(search_id, number - 1) is None:
            return None
        try:  # a round proposed again during the run (its history changed) is read again
            stamp = os.stat(run.round_path(number, self.results)).st_mtime_ns
        except FileNotFoundError:
            return None
        cached = self._rounds.get((search_id, number))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        points = read_points(run, number, self.results)
        if points is None:
            return None
        found = self._plan(run, number, points)
        self._rounds[(search_id, number)] = (stamp, found)
        return found

    def proposed(self, fresh: bool = False) -> list[Round]:
        """Every round that counts now, search by search; `fresh`: only those newer than their
        history (the earlier round's file and its cells' score records), as Snakemake judges a
        job's output: a round whose history has since changed is proposed again, and its old
        cells are no target of the run."""
        out = []
        for search_id, run in self.runs.items():
            for number in range(1, run.search.rounds + 1):
                found = self.round(search_id, number)
                if found is None or (fresh and not self._newer_than_history(found, out)):
                    break
                out.append(found)
        return out

    def _newer_than_history(self, found: Round, earlier: list[Round]) -> bool:
        if found.number == 1:
            return True
        previous = next(
            (r for r in earlier if r.run.id == found.run.id and r.number == found.number - 1),
            None,
        )
        if previous is None:
            return False
        history = [previous.run.round_path(previous.number, self.results)]
        history += [
            f"{self.results}/{path.removeprefix('results/')}" for path in previous.score_records
        ]
        stamp = os.stat(found.run.round_path(found.number, self.results)).st_mtime_ns
        try:
            return all(os.stat(path).st_mtime_ns <= stamp for path in history)
        except FileNotFoundError:
            return False

    def cells(self) -> list[mmcells.Cell]:
        """The cells of every round that counts (shared cells once)."""
        seen: dict[str, mmcells.Cell] = {}
        for found in self.proposed():
            for cell in found.cells:
                seen.setdefault(cell.path, cell)
        return list(seen.values())

    def batch(self, stage: str, batch_id: str) -> mmbatches.Batch:
        """A round's batch, by id (its round read if not yet)."""
        if batch_id not in self._batches[stage]:
            search_id, number = _round_of(batch_id)
            self.round(search_id, number)
        return self._batches[stage][batch_id]

    def batches(self) -> dict[str, dict[str, mmbatches.Batch]]:
        """The batches of every round read so far."""
        return self._batches

    def _plan(self, run: Run, number: int, points: list[dict]) -> Round:
        temperature = self.config["generation"]["temperature"]
        cells, new = [], []
        for point in points:
            hp, spec = point_spec(run.search, point, temperature)
            for seed in self.config["seeds"]:
                shared = self._shared.get((run.dataset, run.pair, seed, spec.decoding()))
                if shared is not None:
                    cells.append(shared)
                    continue
                cell = mmcells.Cell(run.dataset, run.pair, run.search.name, hp, seed, spec)
                cells.append(cell)
                # two points whose components read the same values are one cell
                if cell.path not in self._own and all(c.path != cell.path for c in new):
                    new.append(cell)
        parts = mmbatches.partition(new, self.config["batch_cells"])
        self._own.update({path: _in_round(bid, number) for path, bid in parts.items()})
        if not self.plan_batches:
            return Round(run, number, points, cells, {})
        batch_of = {c.path: self._own.get(c.path) or self._batch_of[c.path] for c in cells}
        planned = mmbatches.plan(self.config, new, self._ar_of, {**self._batch_of, **self._own})
        for stage, table in planned.items():
            self._batches[stage].update(table)
        return Round(run, number, points, cells, batch_of, planned)


def _in_round(batch_id: str, number: int) -> str:
    head, part = batch_id.rsplit("/", 1)
    return f"{head}/{round_id(number, part)}"


def _round_of(batch_id: str) -> tuple[str, int]:
    """(search id, round) of a round's batch id."""
    parts = batch_id.split("/")
    search_id = "/".join(parts[:3])
    number = int(parts[-1].split("-")[1])
    return search_id, number
