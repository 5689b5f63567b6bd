"""Stage search_round: the points of one round of a search, from the cells of its earlier rounds.

Reads the score files of every earlier round's cells (each point at every seed), aggregates them
as the summary does, tells the optimizer each point's objectives (mean over seeds of the value
`Objective.told` takes: an interval's pessimistic end) and constraints, and writes the round's
points (`mmspec.search.optimizer.propose`). A point whose cells have no score file is told as
failed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from mmspec.sweep.arguments import json_object

HELP = "propose the points of one round of a searched method, from its earlier rounds' cells"
READS_ALL_COMPONENTS = True  # the searched method may compose a plugin's components


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sweep = parser.add_mutually_exclusive_group(required=True)
    sweep.add_argument("--sweep", type=json_object, help="the validated config (JSON)")
    sweep.add_argument(
        "--sweep-file",
        help="a file holding it (the workflow's: results/search/sweep.json, written as its jobs "
        "start, so that only what decides a round is a rerun trigger)",
    )
    parser.add_argument("--search", required=True, help="dataset=<d>/pair=<p>/method=<m>")
    parser.add_argument("--round", type=int, required=True, help="the round (1 = the design)")
    parser.add_argument(
        "--size",
        type=int,
        help="the round's points (default: as the sweep's budget gives it; the workflow passes "
        "it with the sweep's budgets left out, so a larger budget reruns only the rounds it adds "
        "or enlarges)",
    )
    parser.add_argument("--out", required=True, help="the round's file")


def main(args: argparse.Namespace) -> None:
    sweep = args.sweep if args.sweep is not None else json.loads(Path(args.sweep_file).read_text())
    points = run(sweep, args.search, args.round, args.out, args.size)
    print(
        f"round {args.round} of {args.search}: {len(points)} points -> {args.out}", file=sys.stderr
    )


def run(config: dict, search_id: str, number: int, out: str, size: int | None = None) -> list:
    """Propose round `number` of the search `search_id` (paths relative to the sweep's folder);
    `size`: its points, where the sweep gives no budget."""
    from mmspec.search.optimizer import propose
    from mmspec.search.rounds import Rounds
    from mmspec.sweep.cells import cells as grid_cells
    from mmspec.sweep.search_runs import with_budget

    if size is not None:
        config = with_budget(config, search_id, number, size)
    rounds = Rounds(config, grid_cells(config), {}, plan_batches=False)
    if search_id not in rounds.runs:
        raise ValueError(f"--search {search_id}: no searched method entry of this sweep runs there")
    search = rounds.runs[search_id].search
    if not 1 <= number <= search.rounds:
        raise ValueError(f"--round {number}: the search has rounds 1..{search.rounds}")
    earlier = []
    for r in range(1, number):
        found = rounds.round(search_id, r)
        if found is None:
            raise ValueError(
                f"round {r} of {search_id}: no file for the search as the config defines it "
                f"({rounds.runs[search_id].round_path(r)}); propose it first"
            )
        earlier.append(found)
    history = _history(config, search, earlier)
    points = propose(search, number, history)
    told = [{"point": h.point, "round": h.round, "values": _told(search, h.row)} for h in history]
    from mmspec.search.rounds import write_round

    write_round(rounds.runs[search_id], number, points, told, out)
    return points


def _told(search, row) -> dict | None:
    if row is None:
        return None
    values = {o.told_as: o.told(row) for o in search.objectives}
    values.update({c.metric: row.get(c.metric) for c in search.constraints})
    return {k: (None if v is None or math.isnan(v) else v) for k, v in values.items()}


def _history(config: dict, search, earlier: list) -> list:
    """Each earlier point with the mean over its seeds' cells of the columns the search reads
    (None where a cell has no score file)."""
    import pyarrow.parquet as pq

    from mmspec.search.optimizer import Finished
    from mmspec.stages import aggregate
    from mmspec.sweep.cell_inputs import scores_path

    seeds = len(config["seeds"])
    files = dict.fromkeys(scores_path(cell) for found in earlier for cell in found.cells)
    present = [f for f in files if Path(f).exists()]
    rows = {}
    if present:
        with tempfile.TemporaryDirectory() as tmp:
            aggregate.run(present, f"{tmp}/cells.parquet", f"{tmp}/blocks.parquet")
            for row in pq.read_table(f"{tmp}/cells.parquet").to_pylist():
                path = (
                    f"dataset={row['dataset']}/pair={row['pair']}/method={row['method']}/"
                    f"hp={row['hp']}/seed={row['seed']}"
                )
                rows[path] = row
    columns = {o.metric for o in search.objectives} | {o.told_as for o in search.objectives}
    columns |= {c.metric for c in search.constraints}
    history = []
    for found in earlier:
        for i, point in enumerate(found.points):
            cells = found.cells[i * seeds : (i + 1) * seeds]
            measured = [rows.get(c.path) for c in cells]
            if any(m is None for m in measured):
                history.append(Finished(point, found.number, None))
                continue
            mean = {}
            for col in columns:
                values = [m.get(col) for m in measured]
                ok = [float(v) for v in values if v is not None and not math.isnan(float(v))]
                mean[col] = sum(ok) / len(ok) if len(ok) == len(values) else math.nan
            history.append(Finished(point, found.number, mean))
    return history
