"""A generate job checkpoints finished samples in chunks: killed (SIGKILL, mid-job) and rerun,
it resumes after its last chunk and writes the table an uninterrupted run writes. A damaged chunk
(torn by a crash, garbled) costs its own samples and those after it, never the job."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import snakemake_cmd

from mmspec.cli.compare import first_difference
from mmspec.methods.runtime import MethodRunner
from mmspec.stages import generate
from mmspec.stages.checkpoints import OutputBusy

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
        "generation": {"max_new_tokens": 8},
        "timing": {"warmup_samples": 0, "threads": 1},
    }
    return root, params


def _inputs(root) -> list[str]:
    """prepared, target visual cache, draft visual cache: the positional inputs of a job."""
    return [str(root / name) for name in ("prepared.parquet", "target.parquet", "draft.parquet")]


def _run(root, params, out, chunk=2):
    generate.run(params, *_inputs(root), str(out), chunk=chunk)


@pytest.fixture(scope="module")
def whole(cell_inputs, tmp_path_factory):
    """The samples table of the cell decoded in one uninterrupted run."""
    root, params = cell_inputs
    out = tmp_path_factory.mktemp("whole") / "whole.parquet"
    _run(root, params, out)
    assert not out.with_name("whole.parquet.partial").exists()  # removed once written
    return out


def _interrupt(root, params, out, monkeypatch, at_decode: int) -> None:
    """Run the job until the method's decode number `at_decode` (from 1) raises, as a
    preemption would stop it there."""
    decode, calls = MethodRunner.decode, []

    def failing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == at_decode:
            raise RuntimeError("preempted")
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(MethodRunner, "decode", failing)
    with pytest.raises(RuntimeError, match="preempted"):
        _run(root, params, out)
    monkeypatch.setattr(MethodRunner, "decode", decode)


def _count_decodes(monkeypatch) -> list:
    """A list that grows by one for each sample the method decodes from now on."""
    decode, calls = MethodRunner.decode, []
    monkeypatch.setattr(
        MethodRunner, "decode", lambda self, *a, **k: (calls.append(1), decode(self, *a, **k))[1]
    )
    return calls


def _chunks(out: Path) -> list[str]:
    return sorted(p.name for p in out.with_name(out.name + ".partial").glob("chunk-*.json"))


def test_an_interrupted_job_resumes_after_its_last_chunk(
    cell_inputs, whole, tmp_path, monkeypatch, capsys
):
    root, params = cell_inputs
    cut = tmp_path / "cut.parquet"
    _interrupt(root, params, cut, monkeypatch, at_decode=6)  # in the third chunk of two samples
    assert _chunks(cut) == ["chunk-0000000-0000002.json", "chunk-0000002-0000004.json"]
    assert not cut.exists()

    calls = _count_decodes(monkeypatch)
    capsys.readouterr()
    _run(root, params, cut)
    assert len(calls) == 3  # only samples 4, 5 and 6 were decoded again
    assert "resuming after 4 finished samples" in capsys.readouterr().err
    assert _deterministic(cut) == _deterministic(whole)
    assert not cut.with_name("cut.parquet.partial").exists()


# the job of a killed process: three chunks of two samples written, it waits in the seventh
# sample's decode until it is killed
KILLED_JOB = """
import json, sys, time
from mmspec.methods.runtime import MethodRunner
from mmspec.stages import generate
from mmspec.stages.checkpoints import OutputBusy

decode, calls = MethodRunner.decode, []

def decode_then_wait(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 7:
        time.sleep(3600)
    return decode(self, *args, **kwargs)

MethodRunner.decode = decode_then_wait
generate.run(json.loads(sys.argv[1]), *sys.argv[2:6], chunk=2)
"""


def test_a_chunk_torn_by_a_crash_costs_only_its_own_samples(
    cell_inputs, whole, tmp_path, monkeypatch, capsys
):
    """The job is killed (SIGKILL) after three chunks and its last chunk cut to 100 bytes, as a
    crash before the disk had it would leave it: the rerun names the chunk, decodes its two
    samples again and writes the tokens of an uninterrupted run."""
    root, params = cell_inputs
    cut = tmp_path / "cut.parquet"
    last = cut.with_name("cut.parquet.partial") / "chunk-0000004-0000006.json"
    job = subprocess.Popen(
        [sys.executable, "-c", KILLED_JOB, json.dumps(params), *_inputs(root), str(cut)],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not last.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.poll() is None, "the job ended before its third chunk"
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert len(_chunks(cut)) == 3 and not cut.exists()
    last.write_bytes(last.read_bytes()[:100])

    calls = _count_decodes(monkeypatch)
    capsys.readouterr()
    _run(root, params, cut)
    err = capsys.readouterr().err
    assert len(calls) == 3  # samples 4 and 5 (the torn chunk's) and 6
    assert f"{last}: unreadable (JSONDecodeError" in err
    assert "dropped with the 2 samples it held (from sample 4); they are decoded again" in err
    assert "resuming after 4 finished samples (2 chunks)" in err
    assert first_difference(cut, whole) is None  # what mmspec compare-outputs compares
    assert _deterministic(cut) == _deterministic(whole)
    assert not cut.with_name("cut.parquet.partial").exists()


def _garble(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[:50] + b"\x00\xff garbled \xff" + data[70:])
    return "unreadable ("


def _without_records(path: Path) -> str:
    chunk = json.loads(path.read_text())
    del chunk["records"]
    path.write_text(json.dumps(chunk))
    return "not a whole chunk (no records)"


def _one_record_short(path: Path) -> str:
    chunk = json.loads(path.read_text())
    chunk["records"].pop()
    path.write_text(json.dumps(chunk))
    return "it holds 1 records, its name says 2"


def _a_token_changed(path: Path) -> str:
    """Still whole JSON of two records: one output token is another (a flipped digit)."""
    chunk = json.loads(path.read_text())
    tokens = chunk["records"][0]["output_ids"]
    tokens[0] += 1
    path.write_text(json.dumps(chunk))
    return "its records or counters do not match its checksum"


@pytest.mark.parametrize("damage", [_garble, _without_records, _one_record_short, _a_token_changed])
def test_a_damaged_middle_chunk_is_dropped_with_the_chunks_after_it(
    cell_inputs, whole, tmp_path, monkeypatch, capsys, damage
):
    root, params = cell_inputs
    cut = tmp_path / "cut.parquet"
    _interrupt(root, params, cut, monkeypatch, at_decode=7)
    assert len(_chunks(cut)) == 3
    middle = cut.with_name("cut.parquet.partial") / "chunk-0000002-0000004.json"
    what = damage(middle)

    calls = _count_decodes(monkeypatch)
    capsys.readouterr()
    _run(root, params, cut)
    err = capsys.readouterr().err
    assert len(calls) == 5  # only the first chunk's samples were kept
    assert f"{middle}: {what}" in err
    assert "dropped with the 2 samples it held (from sample 2), and the chunk after it" in err
    assert "the job resumes at sample 2" in err
    assert first_difference(cut, whole) is None
    assert _deterministic(cut) == _deterministic(whole)


def test_chunks_of_another_job_are_not_reused(cell_inputs, tmp_path, monkeypatch, capsys):
    root, params = cell_inputs
    _interrupt(root, params, tmp_path / "out.parquet", monkeypatch, at_decode=3)
    changed = {**params, "generation": {"max_new_tokens": 6}}
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
        if list(generate_dir.rglob("chunk-0000000-*.json")):
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


def test_chunks_named_as_earlier_versions_named_them_are_resumed(tmp_path, capsys):
    from mmspec.stages.checkpoints import Checkpoints

    checkpoints = Checkpoints(tmp_path / "out.parquet", "k")
    checkpoints.folder.mkdir()
    for first in (0, 2):  # chunk-<first>.json, without the end
        records = [{"i": first}, {"i": first + 1}]
        chunk = {"key": "k", "first": first, "records": records, "counters": {"n": first}}
        (checkpoints.folder / f"chunk-{first:07d}.json").write_text(json.dumps(chunk))
    checkpoints.save(4, [{"i": 4}], {"n": 4})
    records, counters = checkpoints.load()
    assert [r["i"] for r in records] == [0, 1, 2, 3, 4]
    assert counters == [{"n": n} for n in (0, 2, 4)]
    (checkpoints.folder / "chunk-0000002.json").write_text("{")
    capsys.readouterr()
    records, _ = checkpoints.load()
    assert [r["i"] for r in records] == [0, 1]
    err = capsys.readouterr().err
    assert "chunk-0000002.json: unreadable (JSONDecodeError" in err
    assert "dropped with the samples it held (from sample 2), and the chunk after it" in err
    assert [p.name for p in checkpoints.folder.iterdir()] == ["chunk-0000000.json"]


def test_a_second_process_on_the_same_cell_stops_naming_the_first(cell_inputs, tmp_path):
    """A job a killed Snakemake left running, and the rerun's job for the same cell: the rerun
    stops at once (its error names the first), and the first one's work is untouched."""
    root, params = cell_inputs
    out = tmp_path / "cell.parquet"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from mmspec.stages.checkpoints import one_writer\n"
            f"with one_writer({str(out)!r}):\n"
            "    print('writing', flush=True)\n"
            "    time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "writing"
        with pytest.raises(OutputBusy) as busy:
            _run(root, params, out)
        assert f"{out}: process {holder.pid} on " in str(busy.value)
        assert "stop that process, or let it finish, then rerun" in str(busy.value)
        assert not out.exists() and _chunks(out) == []
    finally:
        holder.kill()
        holder.wait()
    _run(root, params, out)  # the lock went with its process
    assert out.exists()
