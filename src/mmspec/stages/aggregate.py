"""Stage aggregate: DuckDB over an explicit list of score files (the workflow's: those of the
sweep's cells) -> one row per cell, plus the per-step table (blocks) that the report's weight
plots and acceptance curves read.

The score files are read in batches of BATCH_FILES (one score file holds one cell), so memory
follows the batch, not the sweep: the blocks of each batch are streamed to disk as they come, and
only the cells table's own rows are kept until the end. Both tables appear atomically.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmspec.methods.registry import label
from mmspec.storage.tables import BLOCKS, THUMBNAILS, write_table
from mmspec.sweep import cell_metrics
from mmspec.sweep.arguments import json_object
from mmspec.sweep.cell_metrics import CELLS

# Score files per DuckDB query. A batch's blocks are materialised once (ordered, with a window
# per sample-turn), so this bounds the stage's memory at the batch's steps.
BATCH_FILES = 200
CELL_KEY = ["dataset", "pair", "method", "hp", "seed"]

HELP = "one row per cell from the score files of a sweep (or of a list)"
READS_ALL_COMPONENTS = True


def metrics_select() -> str:
    """The select list of the declared metrics that the query aggregates (cell_metrics)."""
    return ",\n  ".join(f"{m.sql} AS {m.name}" for m in cell_metrics.CELL_METRICS if m.sql)


# One row per cell: its keys and method, the declared metrics the query aggregates (the others
# are computed from it: the speedup from the per-sample-turn lists below, `speedup`, and the
# intervals, `INTERVALS`), and those lists.
CELLS_SQL = """
SELECT
  dataset, pair, method, hp, any_value(hparams) AS hparams, seed,
  -- one score file is one cell: more is a mix-up worth stopping for (see _check_one_file)
  count(DISTINCT filename) AS n_files, min(filename) AS file, max(filename) AS other_file,
  any_value(registry_method) AS registry_method,
  any_value(views) AS views,
  any_value(weights) AS weights,
  any_value(tree) AS tree,
  any_value(gamma) AS gamma,
  any_value(acceptance) AS acceptance,
  any_value(lossless_rule) AS lossless_rule,
  any_value(temperature) AS temperature,
  {metrics},
  any_value(device) AS device,
  -- the per-sample-turn timings the speedup pools, for its bootstrap interval (not written)
  list(ar_probe_s ORDER BY sample_id, turn) AS timing_probe_s,
  list(ar_cell_probe_s ORDER BY sample_id, turn) AS timing_cell_probe_s,
  list(ar_cell_decode_s ORDER BY sample_id, turn) AS timing_ref_s,
  list(ar_cell_n_tokens - 1 ORDER BY sample_id, turn) AS timing_ref_tokens,
  list(decode_s ORDER BY sample_id, turn) AS timing_s,
  list(new_tokens ORDER BY sample_id, turn) AS timing_tokens,
  list(steps ORDER BY sample_id, turn) AS tau_steps,
  list(turn ORDER BY sample_id, turn) AS tau_turns,
  -- the per-sample-turn qualities the retentions pair, for their bootstrap intervals (not written)
  list(quality ORDER BY sample_id, turn) AS paired_quality,
  list(ar_quality ORDER BY sample_id, turn) AS paired_ar_quality,
  list(judge_score ORDER BY sample_id, turn) AS paired_judge_score,
  list(ar_judge_score ORDER BY sample_id, turn) AS paired_ar_judge_score
FROM s
GROUP BY dataset, pair, method, hp, seed
ORDER BY dataset, pair, method, hp, seed
""".replace("{metrics}", metrics_select())


# One batch of score files, read once for both queries (opening thousands of small files is
# what a big sweep's aggregate spends its time on).
BATCH_SQL = """
CREATE OR REPLACE TEMP TABLE s AS
SELECT * FROM read_parquet($files, union_by_name = true, filename = true)
"""

RESAMPLES = 2000  # bootstrap resamples of a cell's sample-turns
CONFIDENCE = 0.95


# One row per drafting step; `position` counts the tokens emitted before it (the first token
# comes from the prefill). AR cells have no drafting steps and are left out.
BLOCKS_SQL = """
WITH steps AS (
  SELECT dataset, pair, method, hp, seed, views, registry_method, sample_id, turn,
    unnest(range(len(step_accepted))) AS step, step_drafted, step_accepted, step_weights,
    step_depth, step_width
  FROM s
  WHERE drafted_sum > 0
), rows AS (
  SELECT dataset, pair, method, hp, seed, views, registry_method, sample_id, turn,
    CAST(step AS INTEGER) AS step,
    step_drafted[step + 1] AS drafted, step_accepted[step + 1] AS accepted,
    step_depth[step + 1] AS depth, step_width[step + 1] AS width,
    step_weights[step + 1] AS weights
  FROM steps
)
SELECT *,
  CAST(1 + coalesce(sum(accepted + 1) OVER (
    PARTITION BY dataset, pair, method, hp, seed, sample_id, turn ORDER BY step
    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS INTEGER) AS position
FROM rows
ORDER BY dataset, pair, method, hp, seed, sample_id, turn, step
"""


def run(
    score_files: list[str],
    out: str,
    blocks_out: str,
    groups: dict | None = None,
    batch_files: int = BATCH_FILES,
) -> int:
    """Write the cells table to `out` and the per-step table to `blocks_out`; returns #cells.

    `groups` maps datasets to their group in averages (default "benchmark"). The files are read
    `batch_files` at a time; the blocks rows follow the order of `score_files`.
    """
    missing = [f for f in score_files if not Path(f).exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} score file(s) missing, e.g. {missing[:5]}")
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # a bar per batch would flood the job's log
    parts = []
    with _streamed(blocks_out, BLOCKS) as write_blocks:
        for start in range(0, len(score_files), batch_files):
            con.execute(BATCH_SQL, {"files": list(score_files[start : start + batch_files])})
            parts.append(_cells(con, groups or {}))
            blocks = con.sql(BLOCKS_SQL).to_arrow_table()
            write_blocks(blocks.append_column("label", _labels(blocks)))
        table = pa.concat_tables(parts) if parts else CELLS.empty_table()
        _check_unique(table)  # before the blocks table appears
    write_table(table.sort_by([(c, "ascending") for c in CELL_KEY]), out, CELLS)
    return table.num_rows


def _cells(con: duckdb.DuckDBPyConnection, groups: dict) -> pa.Table:
    """The cells of the batch of score files in table `s`, as CELLS (the per-sample-turn lists
    dropped once their intervals are taken)."""
    table = con.sql(CELLS_SQL, params={"thumbnails": THUMBNAILS}).to_arrow_table()
    _check_one_file(table)
    # TABED eq. 1: tau / (k * c + 1) with k the draft forwards per step (gamma for a chain; the
    # drafted levels for a tree); AR has no draft, so its estimate is its tau (1).
    speedups = [speedup(*cell) for cell in zip(*_lists(table, SPEEDUP_LISTS), strict=True)]
    table = table.append_column("speedup", pa.array(speedups, pa.float64()))
    # AR's rate as the speedup takes it: on the cell's own job
    rates = [
        r / x if r is not None and x and not math.isnan(x) else math.nan
        for r, x in zip(table.column("tokens_per_s").to_pylist(), speedups, strict=True)
    ]
    table = table.append_column("ar_tokens_per_s", pa.array(rates, pa.float64()))
    ratios = [ar_speed_ratio(*cell) for cell in zip(*_lists(table, SPEEDUP_LISTS), strict=True)]
    table = table.append_column("ar_speed_ratio", pa.array(ratios, pa.float64()))
    table = table.append_column("speedup_eq1", _eq1(table))
    table = table.append_column("speedup_eq1_verify", _eq1(table, "verify_cost"))
    for name, interval, lists in INTERVALS:
        low, high = _intervals(table, interval, lists)
        table = table.append_column(f"{name}_low", low)
        table = table.append_column(f"{name}_high", high)
    table = table.append_column("label", _labels(table))
    group = [groups.get(d, "benchmark") for d in table.column("dataset").to_pylist()]
    table = table.append_column("group", pa.array(group, pa.string()))
    return table.select(CELLS.names).cast(CELLS)


def _check_one_file(table: pa.Table) -> None:
    """Every cell of a batch came from one score file."""
    for row in table.filter(pc.greater(table["n_files"], 1)).to_pylist()[:1]:
        key = "/".join(f"{c}={row[c]}" for c in CELL_KEY)
        raise ValueError(
            f"cell {key} has rows in {row['n_files']} score files "
            f"({row['file']}, {row['other_file']}, ...): one score file holds one cell"
        )


def _check_unique(table: pa.Table) -> None:
    """No cell came from score files of two batches."""
    counts = table.group_by(CELL_KEY).aggregate([("seed", "count")])
    for row in counts.filter(pc.greater(counts["seed_count"], 1)).to_pylist()[:1]:
        key = "/".join(f"{c}={row[c]}" for c in CELL_KEY)
        raise ValueError(
            f"cell {key} has rows in {row['seed_count']} score files: one score file holds one cell"
        )


@contextmanager
def _streamed(path: str | Path, schema: pa.Schema) -> Iterator:
    """A function that appends tables (cast to `schema`) to the Parquet file `path`, which
    appears only when the block ends without an error (a partial file is removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            yield lambda table: writer.write_table(table.select(schema.names).cast(schema))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _labels(table) -> pa.Array:
    entries = table.column("method").to_pylist()
    methods = table.column("registry_method").to_pylist()
    return pa.array([label(e, m) for e, m in zip(entries, methods, strict=True)], pa.string())


# The per-sample-turn lists the speedup reads: the job's AR steps (probes, or whole decodes) as
# timed in the job and in the AR cell, the AR cell's decode, and the method's.
SPEEDUP_LISTS = [
    "timing_probe_s",
    "timing_cell_probe_s",
    "timing_ref_s",
    "timing_ref_tokens",
    "timing_s",
    "timing_tokens",
]


def _speedup_columns(probe_s, cell_probe_s, ref_s, ref_tokens, s, tokens):
    """The lists as float arrays, a sample-turn without probes (its AR cell emitted one token)
    adding nothing to the ratio; None where the AR cell's or the method's times are missing."""
    if any(v is None for column in (ref_s, ref_tokens, s, tokens) for v in column):
        return None
    missing = [a is None or b is None for a, b in zip(probe_s, cell_probe_s, strict=True)]
    p = np.asarray([0.0 if gone else a for a, gone in zip(probe_s, missing, strict=True)])
    cp = np.asarray([0.0 if gone else b for b, gone in zip(cell_probe_s, missing, strict=True)])
    return [p, cp, *(np.asarray(c, dtype=float) for c in (ref_s, ref_tokens, s, tokens))]


def _speedups(p, cp, ref, reft, m, mt):
    """The speedup of totals (the last axis summed): (probes / the AR cell's on their steps) x
    the AR cell's time per token / the method's; NaN where a total it divides by is 0."""
    ratio = _over(p.sum(axis=-1), cp.sum(axis=-1))
    ar_per_token = ratio * _over(ref.sum(axis=-1), reft.sum(axis=-1))
    return _over(ar_per_token, _over(m.sum(axis=-1), mt.sum(axis=-1)))


def _over(a, b):
    """a / b, NaN where b is 0 (or NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    out = np.full(np.broadcast(a, b).shape, np.nan)
    np.divide(a, b, out=out, where=(b != 0) & ~np.isnan(b))
    return out


def ar_speed_ratio(probe_s, cell_probe_s, *_) -> float:
    """r: AR's step time in the cell's own job over the AR cell's on the same steps (each
    sample-turn's probe), pooled: how much slower (r > 1) or faster the job's device and load
    ran AR than the AR cell's did. NaN without probes."""
    pairs = [(a, b) for a, b in zip(probe_s, cell_probe_s, strict=True) if a is not None]
    cell = sum(b for _, b in pairs if b is not None)
    return sum(a for a, _ in pairs) / cell if pairs and cell else math.nan


def speedup(probe_s, cell_probe_s, ref_s, ref_tokens, s, tokens) -> float:
    """AR's time per emitted token over the method's, both as on the cell's own job: the AR
    cell's time per token over every sample-turn, scaled by `ar_speed_ratio` (a ratio
    estimator: the AR cell's decodes carry the lengths, the job's probes, each beside the
    method's decode of its sample-turn, carry the job's device and load). NaN where a total is
    missing or 0 (no probes; the AR cell's or the method's answers one token each)."""
    columns = _speedup_columns(probe_s, cell_probe_s, ref_s, ref_tokens, s, tokens)
    return math.nan if columns is None else float(_speedups(*columns))


def speedup_interval(probe_s, cell_probe_s, ref_s, ref_tokens, s, tokens, seed: int = 0):
    """The percentile bootstrap interval (CONFIDENCE) of `speedup`, resampling sample-turns, each
    with its probe, the AR cell's times of it and the method's (so what a long or short sample
    shares with AR cancels, and the probes' noise is carried in)."""
    columns = _speedup_columns(probe_s, cell_probe_s, ref_s, ref_tokens, s, tokens)
    if columns is None or not len(columns[-1]):
        return math.nan, math.nan
    picks = np.random.default_rng(seed).integers(
        0, len(columns[-1]), size=(RESAMPLES, len(columns[-1]))
    )
    return percentile_interval(_speedups(*(c[picks] for c in columns)))


def tau_interval(tokens, steps, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval (CONFIDENCE) of the pooled tau sum tokens / sum steps,
    resampling sample-turns."""
    tokens, steps = (np.asarray(c, dtype=float) for c in (tokens, steps))
    picks = np.random.default_rng(seed).integers(0, len(tokens), size=(RESAMPLES, len(tokens)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = tokens[picks].sum(axis=1) / steps[picks].sum(axis=1)
    return percentile_interval(ratios)


def retention_interval(quality, ar_quality, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap interval (CONFIDENCE) of the retention mean(quality) /
    mean(ar_quality), resampling sample-turns with their AR answer's quality paired (so what
    the samples share, an easy or a hard video, cancels), over the sample-turns with both
    (None: a failed judgement or no metric). NaN when none has both."""
    pairs = zip(quality, ar_quality, strict=True)
    pairs = [(q, a) for q, a in pairs if q is not None and a is not None]
    if not pairs:
        return math.nan, math.nan
    q, a = np.asarray(pairs, dtype=float).T
    picks = np.random.default_rng(seed).integers(0, len(q), size=(RESAMPLES, len(q)))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = q[picks].mean(axis=1) / a[picks].mean(axis=1)
    return percentile_interval(ratios)


def percentile_interval(values: np.ndarray) -> tuple[float, float]:
    """The central CONFIDENCE interval of bootstrap statistics (non-finite ones dropped)."""
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return math.nan, math.nan
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def turn_tau_interval(turn: int):
    """`tau_interval` over the sample-turns of turn `turn` (0-based) alone: resampling that
    turn's sample-turns; NaN where the cell has none."""

    def interval(tokens, steps, turns, seed: int = 0) -> tuple[float, float]:
        picked = [(t, s) for t, s, k in zip(tokens, steps, turns, strict=True) if k == turn]
        if not picked:
            return math.nan, math.nan
        return tau_interval(*zip(*picked, strict=True), seed=seed)

    return interval


# (column, its interval function, the CELLS_SQL per-sample-turn lists it reads): written as
# <column>_low and <column>_high
INTERVALS = [
    ("tau", tau_interval, ["timing_tokens", "tau_steps"]),
    ("tau_turn1", turn_tau_interval(0), ["timing_tokens", "tau_steps", "tau_turns"]),
    ("tau_turn2", turn_tau_interval(1), ["timing_tokens", "tau_steps", "tau_turns"]),
    ("speedup", speedup_interval, SPEEDUP_LISTS),
    ("retention", retention_interval, ["paired_quality", "paired_ar_quality"]),
    ("judge_retention", retention_interval, ["paired_judge_score", "paired_ar_judge_score"]),
]


def _lists(table, names: list[str]) -> list[list]:
    """The cells' per-sample-turn lists in columns `names`."""
    return [table.column(name).to_pylist() for name in names]


def _intervals(table, interval, names: list[str]) -> tuple[pa.Array, pa.Array]:
    """Per cell, `interval(*lists)` of the cell's per-sample-turn lists in columns `names`."""
    intervals = [interval(*cell) for cell in zip(*_lists(table, names), strict=True)]
    low, high = zip(*intervals, strict=True) if intervals else ((), ())
    return pa.array(low, pa.float64()), pa.array(high, pa.float64())


def _eq1(table, verify: str | None = None):
    """tau / (k * c + v) per cell, v = 1 (Eq. 1: a verification costs one AR step) or the
    cell's column `verify` (its measured cost)."""
    costs = table.column(verify).to_pylist() if verify else [1.0] * table.num_rows
    values = []
    for tau, k, c, v in zip(
        table.column("tau").to_pylist(),
        table.column("draft_forwards_per_step").to_pylist(),
        table.column("latency_ratio").to_pylist(),
        costs,
        strict=True,
    ):
        if tau is None:
            values.append(None)
        elif k is None or math.isnan(k):
            values.append(tau)  # no draft (AR)
        elif c is None or v is None:
            values.append(None)
        else:
            values.append(tau / (k * c + v))
    return pa.array(values, pa.float64())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Aggregate score files into the cells table (one row per cell) and the per-step blocks "
        "table. The files are the cells' of --sweep (what the workflow passes: the command line "
        "stays the same size however many cells the sweep has), or those named by --scores or "
        "listed in --scores-from."
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--blocks", required=True, help="where the per-step table goes")
    files = parser.add_mutually_exclusive_group(required=True)
    files.add_argument(
        "--sweep",
        type=json_object,
        help="a validated sweep config (JSON): its cells' score files under --results, and its "
        "datasets' groups",
    )
    files.add_argument("--scores", nargs="+", help="score files")
    files.add_argument("--scores-from", help="a file listing score files, one per line")
    parser.add_argument("--results", default="results", help="the results folder of --sweep")
    parser.add_argument(
        "--groups", type=json_object, default=None, help="dataset -> group (JSON; not with --sweep)"
    )


def main(args: argparse.Namespace) -> None:
    if args.sweep is not None:
        if args.groups is not None:
            raise ValueError("--groups comes from --sweep's datasets; give one or the other")
        files = sweep_score_files(args.sweep, args.results)
        groups = {name: ds.get("group", "benchmark") for name, ds in args.sweep["datasets"].items()}
    else:
        files = args.scores or read_list(args.scores_from)
        groups = args.groups or {}
    n = run(files, args.out, args.blocks, groups)
    print(f"aggregated {n} cells -> {args.out}", file=sys.stderr)


def sweep_score_files(sweep: dict, results: str = "results") -> list[str]:
    """The score file of every cell of a validated sweep config (`config.validate`'s output), in
    cell order: exactly the sweep's cells (its grids', and its searches' rounds' as their files
    under `results` name them), never whatever else lies under `results`."""
    from mmspec.search.rounds import Rounds
    from mmspec.sweep.cells import cells as sweep_cells

    grid = sweep_cells(sweep)
    searched = Rounds(sweep, grid, {}, results=results, plan_batches=False).cells()
    cells = sorted(
        {c.path: c for c in [*grid, *searched]}.values(),
        key=lambda c: (c.dataset, c.pair, c.method, c.hp, c.seed),
    )
    return [f"{Path(results).as_posix()}/score/{c.path}/scores.parquet" for c in cells]


def read_list(path: str) -> list[str]:
    """The non-blank lines of a list file (score files of `mmspec aggregate --scores-from`)."""
    names = [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]
    if not names:
        raise ValueError(f"{path}: lists no files")
    return names
