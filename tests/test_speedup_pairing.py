"""Why a method's job times AR itself: a cell on a slower machine gets the speedup that full
pairing measures there, where the AR cell's times alone would take the slow machine for a slow
method.

The AR cell decodes on a machine of one speed. The method's cell then runs on a "machine" three
times slower in every forward of target and draft: once with AR probes (the default) and once
under full pairing (AR decoded in full beside every sample-turn, on the same slow machine: the
reference). Time is a virtual clock that only forwards advance (a fixed cost per forward, and
parts per token fed and per cached position), read where the decoding loops and drafters read
`perf_counter`: the test checks the pairing's arithmetic, which wall-clock noise of a few
milliseconds per probe (another process on the machine) would otherwise decide in some runs.
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from mmspec.decoding import loops
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import model as model_drafter
from mmspec.methods.registry import resolve
from mmspec.stages import aggregate, cache_visual, generate, prepare, score
from mmspec.toy import tiny

SLOWER = 3  # a forward costs this many times as much on the slow machine
# a forward's virtual cost on the normal machine: a fixed part, per token fed, per cached position
FORWARD_S, TOKEN_S, CONTEXT_S = 1e-3, 1e-5, 2e-6


class VirtualClock:
    """`perf_counter` of a machine where time passes only in forwards, `slowdown` times as
    slowly as on the normal machine."""

    def __init__(self):
        self.now, self.slowdown = 0.0, 1

    def perf_counter(self) -> float:
        return self.now

    def charging(self, forward):
        def timed(decoder, tokens_or_prompts, *args, **kwargs):
            out = forward(decoder, tokens_or_prompts, *args, **kwargs)
            fed = out.hidden.shape[-2] if out.hidden is not None else 1
            cost = FORWARD_S + TOKEN_S * fed + CONTEXT_S * decoder.length
            self.now += self.slowdown * cost
            return out

        return timed


def _params(method: str, target, hp: str, reference: str) -> dict:
    spec = resolve(method, {"gamma": 4} if method != "ar" else {}).to_dict()
    return {
        "cell": {"dataset": "toy_caption", "pair": "p", "method": method, "hp": hp, "seed": 0,
                 "spec": spec},
        "pair": {"target": str(target), "draft": str(target), "dtype": "float32"},
        "generation": {"max_new_tokens": 32},
        "timing": {"warmup_samples": 2, "threads": 1, "ar_reference": reference},
    }  # fmt: skip


@pytest.mark.slow
def test_a_slower_machine_gets_the_speedup_full_pairing_measures_there(tmp_path, monkeypatch):
    clock = VirtualClock()
    for module in (loops, model_drafter):
        monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    monkeypatch.setattr(Decoder, "prefill", clock.charging(Decoder.prefill))
    monkeypatch.setattr(Decoder, "extend", clock.charging(Decoder.extend))
    target = tiny.save("llava", tmp_path / "target", hidden=64, layers=4, seed=0)
    prepared = str(tmp_path / "prepared.parquet")
    prepare.run("toy_caption", {"source": "toy", "samples": 24}, prepared, 0)
    cache = str(tmp_path / "target.parquet")
    cache_visual.run(str(target), prepared, cache, "float32", 1)
    ar = str(tmp_path / "ar.parquet")
    generate.run(_params("ar", target, "ar", "probe"), prepared, cache, None, ar)

    def cell(name: str, reference: str) -> dict:
        out = str(tmp_path / f"{name}.parquet")
        # the target drafts for itself: every draft accepted, a speedup on any machine
        params = _params("sd_chain", target, name, reference)
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

    normal = cell("normal", "probe")
    clock.slowdown = SLOWER
    probes, full = cell("slow_probes", "probe"), cell("slow_full", "full")
    print(
        "  ".join(
            f"{name} {c['speedup']:.2f} [{c['speedup_low']:.2f}, {c['speedup_high']:.2f}] "
            f"(r {c['ar_speed_ratio']:.2f}, unpaired {c['unpaired']:.2f})"
            for name, c in (("normal", normal), ("slow probes", probes), ("slow full", full))
        )
    )
    # the probes saw the machine slow down...
    assert probes["ar_speed_ratio"] > 2 * normal["ar_speed_ratio"]
    # ...so the cell's speedup is what full pairing measures on the same machine: exactly,
    # since the slowdown is uniform and the probes' times are scaled by AR's on the same
    # positions (a cost that grows with the context cancels)
    assert probes["speedup"] == pytest.approx(full["speedup"], rel=1e-9)
    tolerance = 1 + 1e-9  # the bootstrap of near-equal ratios: bounds equal up to rounding
    assert probes["speedup_low"] <= full["speedup"] * tolerance
    assert full["speedup"] <= probes["speedup_high"] * tolerance
    # where the AR cell's times alone are off by about the machine's slowdown
    assert probes["unpaired"] < 0.6 * full["speedup"]
