"""Why a method's job times AR itself: the same cell on a machine about half as fast keeps its
speedup.

The AR cell decodes on a machine of one speed; the method's cell then runs once at that speed and
once sharing its one CPU with a process that spins (so the job gets about half of the CPU, in
everything it runs). Its probes see the slowdown, so its speedup stays where it was; the AR
cell's times alone (no probes) would take the slow machine for a slow method.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from mmspec.methods.registry import resolve
from mmspec.models import tiny
from mmspec.stages import aggregate, cache_visual, generate, prepare, score


def _params(method: str, hparams: dict, target, draft, samples_hint: str) -> dict:
    spec = dict(resolve(method, hparams), method=method, temperature=0.0)
    return {
        "cell": {"dataset": "toy_diff", "pair": "p", "method": method, "hp": samples_hint,
                 "seed": 0, "spec": spec},
        "pair": {"target": str(target), "draft": str(draft), "dtype": "float32"},
        "generation": {"max_new_tokens": 32, "temperature": 0.0},
        "timing": {"warmup_samples": 2, "threads": 1},
    }  # fmt: skip


@contextlib.contextmanager
def _sharing_a_cpu():
    """This process and a spinning one on one CPU: about half the speed for everything here."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    saved = os.sched_getaffinity(0)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        yield
    finally:
        spinner.kill()
        spinner.wait()
        os.sched_setaffinity(0, saved)


@pytest.mark.slow
def test_a_slower_machine_keeps_the_speedup(tmp_path):
    target = tiny.save("llava", tmp_path / "target", hidden=64, layers=4, seed=0)
    prepared = str(tmp_path / "prepared.parquet")
    prepare.run("toy_caption", {"source": "toy", "samples": 24}, prepared, 0)
    cache = str(tmp_path / "target.parquet")
    cache_visual.run(str(target), prepared, cache, "float32", 1)
    ar = str(tmp_path / "ar.parquet")
    generate.run(_params("ar", {}, target, target, "ar"), prepared, cache, None, ar)

    def cell(name: str) -> dict:
        out = str(tmp_path / f"{name}.parquet")
        # the target drafts for itself: every draft accepted, a real speedup on any machine
        params = _params("sd_chain", {"gamma": 4}, target, target, name)
        generate.run(params, prepared, cache, cache, out, ar_samples=ar)
        scores = str(tmp_path / f"{name}.scores.parquet")
        score.run(out, ar, prepared, "toy", scores)
        cells = str(tmp_path / f"{name}.cells.parquet")
        aggregate.run([scores], cells, str(tmp_path / f"{name}.blocks.parquet"))
        (row,) = pq.read_table(cells).to_pylist()
        rows = pq.read_table(scores).to_pylist()
        # what the AR cell's times alone would say: AR as it ran there, the method as here
        ar_alone = sum(r["ar_cell_decode_s"] for r in rows) / sum(
            r["ar_cell_n_tokens"] - 1 for r in rows
        )
        method = sum(r["decode_s"] for r in rows) / sum(r["new_tokens"] for r in rows)
        return {**row, "unpaired": ar_alone / method}

    normal = cell("normal")
    with _sharing_a_cpu():
        slow = cell("slow")
    assert json.loads(slow["hparams"]) == json.loads(normal["hparams"])
    print(
        f"speedup normal {normal['speedup']:.2f} [{normal['speedup_low']:.2f}, "
        f"{normal['speedup_high']:.2f}] (r {normal['ar_speed_ratio']:.2f}); slowed "
        f"{slow['speedup']:.2f} [{slow['speedup_low']:.2f}, {slow['speedup_high']:.2f}] "
        f"(r {slow['ar_speed_ratio']:.2f}); unpaired {normal['unpaired']:.2f} -> "
        f"{slow['unpaired']:.2f}"
    )
    # the probes saw the machine slow down...
    assert slow["ar_speed_ratio"] > 1.5 * normal["ar_speed_ratio"]
    # ...so the speedup stays where it was: the slowed cell's interval (wider: its probes are
    # timed among the spinner's time slices) holds the normal cell's speedup
    assert slow["speedup_low"] <= normal["speedup"] <= slow["speedup_high"]
    # where the AR cell's times alone would have taken the slow machine for a slow method
    assert slow["unpaired"] < 0.7 * normal["unpaired"]
