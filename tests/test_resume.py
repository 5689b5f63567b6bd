"""A generate job checkpoints finished samples in chunks: killed (SIGKILL, mid-job) and rerun,
it resumes after its last chunk and writes the table an uninterrupted run writes."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import snakemake_cmd

from mmspec.methods.runtime import MethodRunner
from mmspec.stages import generate

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"
# every column that does not measure time: equal between an interrupted and a whole run
TIMED = {
    "step_draft_s",
    "step_verify_s",
    "prefill_s",
    "decode_s",
    "ar_prefill_s",
    "ar_decode_s",
    "ar_step_s",
    "check_s",
    "t_q_s",
    "t_p_s",
    "caption_s",
}


def _deterministic(path) -> list[dict]:
    """The untimed columns of a samples table (NaN as a string, so that it equals itself)."""
    rows = pq.read_table(path).to_pylist()
    nan = lambda v: "nan" if isinstance(v, float) and math.isnan(v) else v  # noqa: E731
    return [{k: nan(v) for k, v in r.items() if k not in TIMED} for r in rows]


@pytest.fixture(scope="module")
def cell_inputs(tiny_cell):
    root, target, draft = tiny_cell
    from mmspec.methods.registry import resolve

    spec = resolve("sd_chain", {"gamma": 3}).to_dict()
    params = {
        "cell": {
            "dataset": "toy_diff",
            "pair": "p",
            "method": "sd_chain",
            "hp": "g3",
            "seed": 0,
            "spec": spec,
        },
        "pair": {"target": str(target), "draft": str(draft), "dtype": "float32"},
        "generation": {"max_new_tokens": 8, "temperature": 0.0},
        "timing": {"warmup_samples": 0, "threads": 1},
    }
    return root, params


def _run(root, params, out, chunk=2):
    generate.run(
        params,
        str(root / "prepared.parquet"),
        str(root / "target.parquet"),
        str(root / "draft.parquet"),
        str(out),
        chunk=chunk,
    )


def test_an_interrupted_job_resumes_after_its_last_chunk(
    cell_inputs, tmp_path, monkeypatch, capsys
):
    root, params = cell_inputs
    _run(root, params, tmp_path / "whole.parquet")
    assert not (tmp_path / "whole.parquet.partial").exists()  # removed once written

    decode, calls = MethodRunner.decode, []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 6:  # in the third chunk of two samples
            raise RuntimeError("preempted")
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(MethodRunner, "decode", failing)
    with pytest.raises(RuntimeError, match="preempted"):
        _run(root, params, tmp_path / "cut.parquet")
    chunks = sorted(p.name for p in (tmp_path / "cut.parquet.partial").iterdir())
    assert chunks == ["chunk-0000000.json", "chunk-0000002.json"]
    assert not (tmp_path / "cut.parquet").exists()

    calls.clear()
    monkeypatch.setattr(
        MethodRunner, "decode", lambda self, *a, **k: (calls.append(1), decode(self, *a, **k))[1]
    )
    capsys.readouterr()
    _run(root, params, tmp_path / "cut.parquet")
    assert len(calls) == 3  # only samples 4, 5 and 6 were decoded again
    assert "resuming after 4 finished samples" in capsys.readouterr().err
    assert _deterministic(tmp_path / "cut.parquet") == _deterministic(tmp_path / "whole.parquet")
    assert not (tmp_path / "cut.parquet.partial").exists()


def test_chunks_of_another_job_are_not_reused(cell_inputs, tmp_path, monkeypatch, capsys):
    root, params = cell_inputs
    decode, calls = MethodRunner.decode, []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("preempted")
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(MethodRunner, "decode", failing)
    with pytest.raises(RuntimeError):
        _run(root, params, tmp_path / "out.parquet")
    monkeypatch.setattr(MethodRunner, "decode", decode)
    changed = {**params, "generation": {"max_new_tokens": 6, "temperature": 0.0}}
    _run(root, changed, tmp_path / "out.parquet")
    assert "belongs to another run of this job" in capsys.readouterr().err
    assert all(r["n_tokens"] <= 6 for r in pq.read_table(tmp_path / "out.parquet").to_pylist())


def test_sigkill_mid_generate_then_rerun_gives_the_uninterrupted_results(tmp_path):
    """A real workflow run killed with SIGKILL while a generate job is between chunks; the README's
    recovery command finishes it, and every table equals an uninterrupted run's."""
    cfg = yaml.safe_load(TINY.read_text())
    # 40 samples: after its first chunk of 2, a job has 38 to go, a window the kill meets
    # however the machine's speed varies (16 left it a fraction of a second)
    cfg["datasets"]["toy_caption"]["samples"] = 40
    cfg["methods"] = {"ar": {}, "sd": {"views": ["M"], "gamma": [2]}}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "MMSPEC_CHECKPOINT_EVERY": "2"}

    def snakemake(workdir, *extra, cores=1):
        return subprocess.Popen(
            snakemake_cmd(workdir, config, *extra, cores=cores),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    whole = tmp_path / "whole"
    assert snakemake(whole, cores=2).wait() == 0  # the reference run: any number of cores
    killed = tmp_path / "killed"
    shutil.copytree(whole / "results" / "models", killed / "results" / "models")
    run = snakemake(killed)
    deadline = time.time() + 300
    generate_dir = killed / "results" / "generate"
    while time.time() < deadline and run.poll() is None:
        # its first chunk of 2 done, 38 samples to go: time to kill it before it finishes
        if list(generate_dir.rglob("chunk-0000000.json")):
            break
        time.sleep(0.05)
    assert run.poll() is None, "the run ended before a generate job had checkpointed"
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    partial = [p for p in generate_dir.rglob("*.partial") if list(p.iterdir())]
    assert partial, "no checkpoint left behind by the killed job"
    # what the README tells a user to type after a crash
    assert snakemake(killed, "--unlock").wait() == 0
    resumed = snakemake(killed)  # profiles/default sets rerun-incomplete
    _, err = resumed.communicate()
    assert resumed.returncode == 0, err[-3000:]
    for path in (whole / "results" / "generate").rglob("samples.parquet"):
        twin = killed / path.relative_to(whole)
        assert _deterministic(twin) == _deterministic(path), path
    logs = "".join(p.read_text() for p in (killed / "logs" / "generate").rglob("*.log"))
    assert "resuming after" in logs
