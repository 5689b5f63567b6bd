"""The rows of the sweep's cells: each cell done, failed or not run, and a finished cell's verdict.

A cell passes when all its jobs ran (on the GPU, where this process sees one) and, for a lossless
rule at temperature 0, its output equals AR's on every sample-turn. Sampled cells cannot be
compared token for token: they pass when they ran, and their quality retention against the
sampled AR cell is shown (that rejection sampling keeps the target's distribution exactly is
`mmspec verify-lossless`'s proof).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mmspec.gpu_check.row import Row, number, ratio
from mmspec.gpu_check.workflow import FailedJob, failed_jobs, tail, unlock_command


def cell_name(cell, repeated: set[tuple]) -> str:
    """dataset/pair/method, with the hyperparameter slug (and seed) only where a method entry
    has several cells."""
    name = f"{cell.dataset}/{cell.pair}/{cell.method}"
    if (cell.dataset, cell.pair, cell.method) in repeated:
        name += f" {cell.hp} seed {cell.seed}"
    return name


def cell_rows(out: Path, sweep: dict, status: int, log: str, expect_cuda: bool) -> list[Row]:
    """A row per cell of the validated `sweep` (done, failed or not run) and per failed job
    that belongs to no cell; `status` and `log`: the workflow's exit status and output."""
    from mmspec.sweep import cells as sweep_cells

    cells = sweep_cells.cells(sweep)
    jobs = failed_jobs(log)
    failed = {c.path for c in cells if _failed(out, c, jobs)}
    results = cells_table(out, [c for c in cells if c.path not in failed], status)
    keys = [(c.dataset, c.pair, c.method) for c in cells]
    repeated = {k for k in keys if keys.count(k) > 1}
    rows, claimed = [], set()
    for cell in cells:
        row = Row(cell_name(cell, repeated))
        mine = _failed(out, cell, jobs)
        claimed.update(id(j) for j in jobs if _holds(j, cell))
        done = results.get((cell.dataset, cell.pair, cell.method, cell.hp, cell.seed))
        if mine:
            row.status, row.why = f"FAILED {mine[0].rule}", job_error(out, mine[0], cell)
        elif done is None:
            row.status = "NOT RUN"
            row.why = "a job it needs failed (below)" if status else "missing from the summary"
        else:
            row = judge_cell(row, done, expect_cuda)
        rows.append(row)
    for job in jobs:
        if id(job) not in claimed:
            what = ", ".join(job.outputs) or "?"
            rows.append(Row(f"job {job.rule} {what}", f"FAILED {job.rule}", job_error(out, job)))
    if status and not jobs:
        why = f"snakemake exited {status}: {tail(log)}"
        if "cannot be locked" in log:  # a killed run's lock, or another run in the folder
            why = (
                f"{out} is locked: if no other run uses it, `{unlock_command(out)}`, then the "
                "same command again"
            )
        rows.append(Row("workflow", "FAILED", why=why))
    return rows


def _holds(job: FailedJob, cell) -> bool:
    """The failed job is the cell's own, or the batch of cells it is one of
    (mmspec.workflow.batches)."""
    batch = f"/dataset={cell.dataset}/pair={cell.pair}/method={cell.method}/seed={cell.seed}/"
    return any(f"/{cell.path}/" in o or ("/batches/" in o and batch in o) for o in job.outputs)


def _failed(out: Path, cell, jobs: list[FailedJob]) -> list[FailedJob]:
    """The failed jobs of `cell`: of a failed batch, the cells whose output it did not write."""
    outputs = {
        "generate": f"generate/{cell.path}/samples.parquet",
        "judge": f"judge/{cell.path}/judgements.parquet",
        "score": f"score/{cell.path}/scores.parquet",
    }
    return [
        j
        for j in jobs
        if _holds(j, cell)
        and not (j.rule in outputs and (out / "results" / outputs[j.rule]).exists())
    ]


def job_error(out: Path, job: FailedJob, cell=None) -> str:
    """Where a failed job's log is, and its last line (a stage's one-line error): the cell's
    own log where the job was a batch of cells."""
    own = out / "logs" / job.rule / f"{cell.path}.log" if cell is not None else None
    if own is not None and own.exists():
        last = tail(own.read_text(errors="replace"), 1)
        return f"{last} (log: {own})" if last else f"see {own}"
    if not job.log:
        return f"see {out / 'gpu_check' / 'workflow.log'}"
    log = out / job.log
    last = tail(log.read_text(errors="replace"), 1) if log.exists() else ""
    return f"{last} (log: {log})" if last else f"see {log}"


def cells_table(out: Path, cells, status: int) -> dict:
    """The cells table's rows by cell key: the workflow's summary after a clean run; after a
    failure (no summary then), those of `cells` whose score files exist, aggregated here."""
    from mmspec.stages import aggregate
    from mmspec.storage.tables import read_table
    from mmspec.sweep.cell_metrics import CELLS

    summary = out / "results" / "summary" / "cells.parquet"
    if status != 0:
        scores = [out / "results" / "score" / c.path / "scores.parquet" for c in cells]
        scores = [str(s) for s in scores if s.exists()]
        if not scores:
            return {}
        summary = out / "gpu_check" / "cells.parquet"
        aggregate.run(scores, str(summary), str(out / "gpu_check" / "blocks.parquet"))
    elif not summary.exists():
        return {}
    rows = read_table(summary, CELLS).to_pylist()
    return {(r["dataset"], r["pair"], r["method"], r["hp"], r["seed"]): r for r in rows}


def judge_cell(row: Row, cell: dict, expect_cuda: bool) -> Row:
    """A finished cell's row: its numbers, and whether it passes (the module's docstring)."""
    row = replace(
        row,
        tau=cell["tau"],
        speedup=cell["speedup"],
        verify_cost=cell["verify_cost"],
        eq1_ratio=ratio(cell["speedup"], cell["speedup_eq1"]),
    )
    greedy = cell["temperature"] == 0
    retention = cell["retention"] if cell["retention"] is not None else cell["fid_retention"]
    kept = "" if retention is None else f", retention {retention:.2f}"
    if retention is not None and cell["retention_low"] is not None:
        kept += f" [{number(cell['retention_low'])}, {number(cell['retention_high'])}]"
    if cell["registry_method"] == "ar":
        row.lossless = "AR" if greedy else "AR, sampled"
    elif not cell["lossless_rule"]:
        row.lossless = f"lossy{'' if greedy else ', sampled'}{kept}"
    elif greedy:
        rate, real = cell["lossless_rate"], cell.get("real_divergences")
        ties = cell.get("near_tie_divergences")
        row.lossless = number(rate) if rate is None else f"{rate:.3f}"
        if ties:
            row.lossless += f", {int(ties)} near-tie(s)"
        if rate is None or (real > 0 if real is not None else rate < 1):
            row.status = "FAIL"
            divergence = cell["first_divergence_mean"]
            real = "some" if real is None else int(real)
            row.why = (
                f"acceptance {cell['acceptance']!r} is lossless and the cell greedy, and the "
                f"output equals AR's on a share {number(rate)} of the sample-turns (mean first "
                f"divergence at token {number(divergence)}), with {real} real divergence(s) "
                "beyond a rounding near-tie (positions and margins: divergence_positions, "
                "divergence_ulps in the cell's samples.parquet)"
            )
    else:
        row.lossless = f"sampled{kept}"
    if expect_cuda and not str(cell["device"]).startswith("cuda"):
        row.status, row.why = "FAIL", f"ran on {cell['device']}, not on the GPU"
    elif cell["tau"] is None or not cell["tau"] >= 1:
        row.status, row.why = "FAIL", f"tau {cell['tau']}: a step emits at least one token"
    return row
