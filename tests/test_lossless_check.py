"""The lossless check, shown to fail: a greedy cell of a lossless rule is compared with its AR
cell token for token, every difference is checked against the target on the job's own device,
and only real divergences (beyond a rounding near-tie) are failures (scoring/lossless.py).

- the score stage flags a changed token at its position, and classifies what its generate job
  found there: a near-tie, a real divergence, a device difference, or (not checked) real;
- through the generate stage on tiny models in bf16 and fp16 whose two best tokens are tied
  within rounding, greedy SD leaves AR only at near-ties, and is reported so;
- a mutation of the greedy rule (it accepts a drafted token the target does not emit) is
  reported as real divergences.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from mmspec.decoding.acceptance import greedy
from mmspec.methods.registry import resolve
from mmspec.scoring.lossless import (
    DEVICE,
    NEAR_TIE,
    REAL,
    TIE_ULPS,
    first_divergence,
    kind,
    tie_ulps,
)
from mmspec.stages import cache_visual, generate, prepare, score
from mmspec.storage.tables import SAMPLES, SCORES, read_table, write_table
from mmspec.toy import tiny

SAMPLES_N = 12
MAX_NEW = 24


def test_first_divergence_is_the_first_differing_position():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 9, 4], [1, 2, 3, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2  # one ends where the other goes on
    assert first_divergence([7], [1]) == 0


def test_a_difference_is_a_device_a_near_tie_or_a_real_divergence():
    tie = TIE_ULPS["bfloat16"]
    assert kind(None, tie) is None
    assert kind([], tie) == DEVICE
    assert kind([0.5, tie], tie) == NEAR_TIE
    assert kind([0.5, tie + 0.5], tie) == REAL
    # float32's sums round over more of its last places: a wider margin, in its own ulp
    assert tie_ulps(torch.float32) > tie_ulps(torch.bfloat16) == tie_ulps("float16") == tie
    with pytest.raises(ValueError, match="no near-tie margin for dtype 'float64'"):
        tie_ulps(torch.float64)


def _ar_table(path, tokens: list[list[int]]) -> str:
    rows = [
        {
            "dataset": "d", "pair": "p", "method": "ar", "hp": "default", "hparams": "{}",
            "seed": 0, "registry_method": "ar", "acceptance": None, "lossless_rule": True,
            "temperature": 0.0, "sample_id": f"s{i}", "turn": 0, "output_ids": t,
            "output_text": "", "n_tokens": len(t), "step_accepted": [0] * (len(t) - 1),
            "step_drafted": [0] * (len(t) - 1), "step_verify_s": [0.01] * (len(t) - 1),
            "step_relaxed": [], "decode_s": 0.01 * (len(t) - 1), "prefill_s": 0.01,
            "ar_step_s": [0.01] * (len(t) - 1), "caption_s": 0.0, "device": "cpu",
        }
        for i, t in enumerate(tokens)
    ]  # fmt: skip
    write_table(pa.Table.from_pylist(rows, schema=SAMPLES), path, SAMPLES)
    return str(path)


def _prepared(path, n: int) -> str:
    from mmspec.storage.tables import PREPARED

    rows = [
        {"sample_id": f"s{i}", "turn": 0, "scenario": "d", "messages": "[]", "images": [],
         "image_ids": [], "reference": "", "references": None, "qa": None}
        for i in range(n)
    ]  # fmt: skip
    write_table(pa.Table.from_pylist(rows, schema=PREPARED), path, PREPARED)
    return str(path)


@pytest.mark.parametrize(
    "ulps, near, real, what",
    [
        (None, 0, 1, None),  # a difference the generate job did not check: a failure
        ([], 0, 0, DEVICE),  # the target on the job's device emits these tokens: not the method
        ([0.8, 37.0], 2, 0, NEAR_TIE),  # float32: within 64 ulp
        ([0.8, 370.0], 1, 1, REAL),
    ],
)
def test_the_score_stage_flags_a_changed_token_at_its_position(tmp_path, ulps, near, real, what):
    ar_tokens = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [5, 6, 7, 8]]
    ar = _ar_table(tmp_path / "ar.parquet", ar_tokens)
    cell = read_table(ar, SAMPLES).to_pylist()
    changed = list(ar_tokens[0])
    changed[7] = 99
    for row in cell:
        row |= {"method": "sd", "registry_method": "sd", "acceptance": "greedy"}
    cell[0] |= {"output_ids": changed, "divergence_ulps": ulps, "divergence_positions": None}
    cell[0]["tie_ulps"] = TIE_ULPS["float32"] if ulps is not None else None
    if ulps is not None:
        cell[0]["divergence_positions"] = [7, 9][: len(ulps)]
    write_table(pa.Table.from_pylist(cell, schema=SAMPLES), tmp_path / "sd.parquet", SAMPLES)
    out = tmp_path / "scores.parquet"
    score.run(str(tmp_path / "sd.parquet"), ar, _prepared(tmp_path / "p.parquet", 2), "none", out)
    first, second = read_table(out, SCORES).to_pylist()
    assert (first["lossless"], first["first_divergence"]) == (False, 7)
    assert (first["near_tie_divergences"], first["real_divergences"]) == (near, real)
    assert first["divergence_kind"] == what
    assert (second["lossless"], second["first_divergence"], second["real_divergences"]) == (
        True, None, 0,
    )  # fmt: skip


# ---- through the generate stage ------------------------------------------------------------


def _tied_target(folder, dtype: str, gap: float):
    """A tiny LLaVA whose tokens 5 and 6 are the target's likeliest almost everywhere and tie
    within `gap` (lm_head row 6 = row 5 x (1 + gap)): a verification forward over several tokens
    and AR's one-token forward round differently often enough to flip between them."""
    model, processor = tiny.build("llava", 32, 2, 0)
    with torch.no_grad():
        rows = model.lm_head.weight
        rows[5] *= 3.0
        rows[6] = rows[5] * (1 + gap)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _params(method: str, hparams: dict, target, draft, dtype: str) -> dict:
    spec = resolve(method, hparams).to_dict()
    return {
        "cell": {"dataset": "toy_diff", "pair": "p", "method": method, "hp": json.dumps(hparams),
                 "seed": 0, "spec": spec},
        "pair": {"target": str(target), "draft": str(draft), "dtype": dtype},
        "generation": {"max_new_tokens": MAX_NEW},
        "timing": {"warmup_samples": 0, "threads": 1},
    }  # fmt: skip


def _sweep(tmp_path, dtype: str, target, draft, methods) -> dict:
    """AR cell, then each method's cell against it, then each scored: method -> score rows."""
    prepared = str(tmp_path / "prepared.parquet")
    prepare.run("toy_diff", {"source": "toy", "samples": SAMPLES_N}, prepared, 0)
    caches = {}
    for name, folder in {"target": target, "draft": draft}.items():
        caches[name] = str(tmp_path / f"{name}.parquet")
        cache_visual.run(str(folder), prepared, caches[name], dtype, 1)
    ar = str(tmp_path / "ar.parquet")
    generate.run(_params("ar", {}, target, draft, dtype), prepared, caches["target"], None, ar)
    scored = {}
    for method, hparams in methods:
        out = str(tmp_path / f"{method}.parquet")
        params = _params(method, hparams, target, draft, dtype)
        generate.run(params, prepared, caches["target"], caches["draft"], out, ar_samples=ar)
        scores = str(tmp_path / f"{method}.scores.parquet")
        score.run(out, ar, prepared, "toy", scores)
        scored[method] = read_table(scores, SCORES).to_pylist()
    return scored


@pytest.mark.parametrize("dtype, gap", [("bfloat16", 0.003), ("float16", 0.0002)])
def test_greedy_sd_in_low_precision_leaves_ar_only_at_near_ties(tmp_path, dtype, gap):
    """The target drafts for itself (a chain and a static tree), so every difference from the AR
    cell is the verification's rounding; each is found and classified a near-tie, none real."""
    target = _tied_target(tmp_path / "target", dtype, gap)
    scored = _sweep(tmp_path, dtype, target, target, [("sd_chain", {"gamma": 4}), ("sd_tree", {})])
    rows = [r for rows in scored.values() for r in rows]
    differ = [r for r in rows if not r["lossless"]]
    assert differ, "no flip: the tied model no longer exercises the check"
    assert all(r["real_divergences"] == 0 for r in rows)
    assert all(r["divergence_kind"] == NEAR_TIE for r in differ)
    assert all(r["near_tie_divergences"] >= 1 for r in differ)
    assert max(r["divergence_max_ulps"] for r in differ) <= TIE_ULPS[dtype]


def test_a_broken_greedy_rule_is_reported_as_real_divergences(tmp_path, monkeypatch):
    """The rule accepts the first drafted token whatever the target says: the outputs leave AR,
    and the target's own argmax on the job's device shows it, far beyond any rounding."""

    def accepts_one_more(proposal, logits, temperature, sampler):
        path, token = greedy.accept_greedy(proposal, logits, temperature, sampler)
        if not path and proposal.tokens and proposal.is_chain:
            return [0], int(logits[1].argmax())
        return path, token

    monkeypatch.setattr(greedy.Greedy, "judge", staticmethod(accepts_one_more))
    target = tiny.save("llava", tmp_path / "target", seed=0)
    draft = tiny.save("llava", tmp_path / "draft", layers=1, seed=1)
    rows = _sweep(tmp_path, "float32", target, draft, [("sd_chain", {"gamma": 3})])["sd_chain"]
    assert sum(r["real_divergences"] for r in rows) > 0
    assert {r["divergence_kind"] for r in rows if not r["lossless"]} == {REAL}
    monkeypatch.undo()  # the rule as it is: the same cell is lossless
    (tmp_path / "ok").mkdir()
    good = _sweep(tmp_path / "ok", "float32", target, draft, [("sd_chain", {"gamma": 3})])
    assert all(r["lossless"] and r["real_divergences"] == 0 for r in good["sd_chain"])


def test_an_output_that_ends_where_ar_does_not_is_a_real_divergence():
    from mmspec.stages.generate import misplaced_end

    stop, max_new = {2}, 6
    assert misplaced_end([5, 6, 2], stop, max_new) is None  # stopped as AR does
    assert misplaced_end([5, 6, 7, 8, 9, 4], stop, max_new) is None  # ran to max_new
    assert misplaced_end([5, 6, 7], stop, max_new) == 3  # ended early, with no stop token
    assert misplaced_end([5, 2, 7], stop, max_new) == 2  # went on past a stop token
    assert misplaced_end([], stop, max_new) == 0


def test_a_loop_that_stops_early_is_reported_as_a_real_divergence(tmp_path, monkeypatch):
    """A speculative loop that ends three tokens before max_new leaves an output that is a
    prefix of AR's: no token of it is wrong, its end is."""
    from mmspec.decoding import loops

    target = tiny.save("llava", tmp_path / "target", seed=0)
    finished = loops.finished
    original = generate.run

    def run_stopping_early(params, *args, **kwargs):
        if params["cell"]["method"] != "ar":
            monkeypatch.setattr(
                loops, "finished", lambda tokens, stop, max_new: finished(tokens, stop, max_new - 3)
            )
        return original(params, *args, **kwargs)

    monkeypatch.setattr(generate, "run", run_stopping_early)
    rows = _sweep(tmp_path, "float32", target, target, [("sd_chain", {"gamma": 2})])["sd_chain"]
    early = [r for r in rows if not r["lossless"]]
    assert early and all(r["divergence_kind"] == REAL and r["real_divergences"] >= 1 for r in early)


def test_the_speedup_references_are_written(tmp_path):
    """Each method row carries the AR cell's time of its sample-turn and the probe's steps as
    timed in the job and in the AR cell (the speedup's inputs)."""
    target = tiny.save("llava", tmp_path / "target", seed=0)
    draft = tiny.save("llava", tmp_path / "draft", layers=1, seed=1)
    rows = _sweep(tmp_path, "float32", target, draft, [("sd_chain", {"gamma": 3})])["sd_chain"]
    ar = pq.read_table(tmp_path / "ar.parquet").to_pylist()
    probes = pq.read_table(tmp_path / "sd_chain.parquet").to_pylist()
    for row, reference, probe in zip(rows, ar, probes, strict=True):
        assert row["ar_cell_decode_s"] == reference["decode_s"]
        steps = min(len(probe["ar_step_s"]), len(reference["step_verify_s"]))
        assert 0 < steps <= 8  # timing.ar_probe_tokens, or fewer where AR stopped sooner
        assert row["ar_probe_s"] == pytest.approx(sum(probe["ar_step_s"][:steps]))
        assert row["ar_cell_probe_s"] == pytest.approx(sum(reference["step_verify_s"][:steps]))
