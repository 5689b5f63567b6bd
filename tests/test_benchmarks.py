"""The engine benchmarks that no other test runs, end to end on the shared tiny run's toy pair
with a few steps: a benchmark that no longer matches the engine fails here. Timings are never
asserted; what a benchmark counts is."""

from __future__ import annotations

import json
import runpy
import sys

import pytest
from workflow_cli import ROOT

BENCHMARKS = ROOT / "benchmarks"


def _run(script: str, *args: str, monkeypatch) -> int:
    """The script as `python benchmarks/<script> ARGS` runs it, in this process."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as end:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    return end.value.code


def test_bench_ensemble_times_every_setting_against_single(tiny_run, tmp_path, monkeypatch):
    draft = tiny_run / "results" / "models" / "toy" / "draft"
    out = tmp_path / "ensemble.json"
    args = ["--draft", str(draft), "--no-68m", "--steps", "2", "--warmup", "1", "--rounds", "2"]
    assert _run("bench_ensemble.py", *args, "--json", str(out), monkeypatch=monkeypatch) == 0
    result = json.loads(out.read_text())["toy_draft"]
    settings = {"single", "batched_2", "batched_4", "serial_2", "serial_4"}
    assert set(result["median_step_ms"]) == settings
    assert result["ratio_to_single"]["single"] == 1.0
    assert set(result["prompt_tokens"]) == set("MTCP")


def test_bench_tree_verify_counts_one_target_forward_per_step(tiny_run, tmp_path, monkeypatch):
    models = tiny_run / "results" / "models" / "toy"
    out = tmp_path / "tree.json"
    args = ["--target", str(models / "target"), "--draft", str(models / "draft")]
    args += ["--repeats", "2", "--samples", "2", "--json", str(out)]
    assert _run("bench_tree_verify.py", *args, monkeypatch=monkeypatch) == 0
    result = json.loads(out.read_text())
    forwards = result["forwards_per_step"]
    # every forward of the target is counted, the lean one included: one per verification
    assert forwards["steps"] > 0 and forwards["target_forwards"] == forwards["steps"]


def test_bench_engine_matches_hf_generate_token_for_token(tiny_run, tmp_path, monkeypatch):
    models = tiny_run / "results" / "models" / "toy"
    prepared = tiny_run / "results" / "prepared" / "toy_caption.parquet"
    out = tmp_path / "engine.json"
    args = ["--target", str(models / "target"), "--draft", str(models / "draft")]
    args += ["--prepared", str(prepared), "--samples", "2", "--warmup", "1"]
    args += ["--max-new-tokens", "8", "--json", str(out)]
    # exit status 0: mmspec's AR and chain SD gave HF greedy generate's tokens on every sample
    assert _run("bench_engine.py", *args, monkeypatch=monkeypatch) == 0
    result = json.loads(out.read_text())
    assert result["samples"] == 2
    assert set(result["runners"]) == {"ours_ar", "hf_generate", "ours_sd", "hf_assisted"}
    assert result["eq1"]["speedup_eq1"] > 0
