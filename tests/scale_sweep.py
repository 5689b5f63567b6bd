"""A sweep of many cells with a synthetic but schema-valid score table per cell: the input of the
sweep-scale test (test_sweep_scale.py) and of benchmarks/bench_sweep_report.py.

Two toy datasets x `seeds` seeds x (AR + SD at gamma 1..99): 200 cells per seed, so 50 seeds
make 10 000 cells. Each cell's numbers depend on its gamma and seed (tau rises with gamma and
saturates, the speedup peaks at a small gamma, quality drifts with the seed and, greedy SD being
lossless, equals AR's), so pooling over seeds and the Pareto front have something to find.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from mmspec.storage.tables import SCORES, write_table
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep.cell_keys import size_and_time
from mmspec.workflow import batches

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("toy_caption", "toy_vqa")
GAMMAS = list(range(1, 100))
CELLS_PER_SEED = len(DATASETS) * (1 + len(GAMMAS))
SAMPLES = 2  # sample-turns per cell
T_P, T_Q = 0.002, 0.0004  # target and draft forward times (s)


def sweep_config(seeds: int) -> dict:
    """The sweep of `seeds` seeds (CELLS_PER_SEED cells each), toy models as the default's."""
    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return {
        "seeds": list(range(seeds)),
        "toy": base["toy"],
        "datasets": {name: {"source": "toy", "samples": SAMPLES} for name in DATASETS},
        "pairs": {"toy": {"target": "toy:target", "draft": "toy:draft"}},
        "methods": {"ar": {}, "sd": {"views": ["M"], "gamma": GAMMAS}},
    }


def write_config(path: Path, seeds: int) -> Path:
    path.write_text(yaml.safe_dump(sweep_config(seeds)))
    return path


def cell_rows(cell: mmcells.Cell) -> list[dict]:
    """The score rows of one cell: SAMPLES sample-turns of made-up but consistent numbers."""
    gamma = cell.spec.gamma if cell.spec.method != "ar" else None
    rng = np.random.default_rng([cell.seed, gamma or 0, len(cell.dataset)])
    tau = 1.0 if gamma is None else 1 + 3.5 * (1 - 0.8**gamma) + rng.normal(0, 0.1)
    rows = []
    for i in range(SAMPLES):
        new = 30 + i
        steps = max(1, round(new / tau))
        accepted = new - steps
        drafted = steps * gamma if gamma else 0
        # a step's accepted draft tokens, spread evenly (the blocks table's rows)
        per_step = [accepted // steps + (s < accepted % steps) for s in range(steps)]
        decode = steps * (T_P * (1 + 0.05 * (gamma or 0)) + T_Q * (gamma or 0))
        quality = 0.8 + 0.05 * np.sin(cell.seed + i)
        rows.append(
            {
                **cell.columns(),
                "registry_method": cell.spec.method,
                "views": cell.spec.views,
                "weights": cell.spec.weights,
                "tree": cell.spec.tree if gamma else None,
                "gamma": gamma,
                "acceptance": cell.spec.acceptance or "greedy",
                "lossless_rule": True,
                "temperature": 0.0,
                "sample_id": f"s{i}",
                "turn": 0,
                "scenario": cell.dataset,
                "n_tokens": new + 1,
                "steps": steps,
                "new_tokens": new,
                "accepted_sum": accepted,
                "relaxed_sum": 0,
                "drafted_sum": drafted,
                "verify_s": steps * T_P * 1.1,
                "step_drafted": [gamma] * steps if gamma else [],
                "step_accepted": per_step if gamma else [],
                "step_weights": [[1.0]] * steps if gamma else [],
                "step_depth": [gamma] * steps if gamma else [],
                "step_width": [1] * steps if gamma else [],
                "caption_s": 0.0,
                "prefill_s": 0.01,
                "decode_s": decode * (1 + rng.normal(0, 0.03)),
                "ar_decode_s": new * T_P * (1 + rng.normal(0, 0.03)),
                "ar_n_tokens": new + 1,
                # the AR cell's decode of the sample-turn, and the probe's steps as timed here
                # and in the AR cell (the speedup's reference)
                "ar_cell_decode_s": new * T_P,
                "ar_cell_n_tokens": new + 1,
                "ar_probe_s": 8 * T_P * (1 + rng.normal(0, 0.03)),
                "ar_cell_probe_s": 8 * T_P,
                "real_divergences": 0,
                "near_tie_divergences": 0,
                "t_q_s": T_Q if gamma else None,
                "t_p_s": T_P,
                "draft_forwards_per_step": float(gamma) if gamma else None,
                "draft_visual_tokens": 16 if gamma else 0,
                "target_visual_tokens": 16,
                "lossless": True,
                "quality": float(quality),
                "ar_quality": float(quality),
                "device": "cpu",
            }
        )
    return rows


def write_scores(workdir: Path, config: dict) -> list[mmcells.Cell]:
    """results/score/<cell>/scores.parquet under `workdir` for every cell of `config`, and the
    records of the score jobs (mmspec.workflow.batches) that would have written them, which the
    aggregate job reads."""
    validated = mmconfig.validate(config)
    cells = mmcells.cells(validated)
    # two processes, a half of the cells each: the 10 000 files take about 16 s in one
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_write_scores, [(workdir, cells[0::2]), (workdir, cells[1::2])]))
    for batch in batches.of_sweep(validated, cells)["score"].values():
        record = workdir / batch.record
        record.parent.mkdir(parents=True, exist_ok=True)
        outputs = {job.out: size_and_time((workdir / job.out).stat()) for job in batch.jobs}
        record.write_text(json.dumps({"outputs": outputs}))
    return cells


def _write_scores(job: tuple[Path, list[mmcells.Cell]]) -> None:
    workdir, cells = job
    for cell in cells:
        table = pa.Table.from_pylist(cell_rows(cell), schema=SCORES)
        write_table(table, workdir / "results" / "score" / cell.path / "scores.parquet", SCORES)
