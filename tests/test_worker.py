"""Warm workers (mmspec.worker): `mmspec generate` from the command line runs in a long-lived
worker that keeps the models loaded, and writes what a fresh process writes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
from test_resume import _deterministic

from mmspec import worker
from mmspec.methods.registry import resolve
from mmspec.models import loading, tiny


def _argv(tiny_cell, method: str, out: Path, max_new: int = 8, **hp) -> list[str]:
    root, target, draft = tiny_cell
    spec = dict(resolve(method, hp), method=method, temperature=0.0)
    params = {
        "cell": {"dataset": "d", "pair": "p", "method": method, "hp": "h", "seed": 0, "spec": spec},
        "pair": {"target": str(target), "draft": str(draft), "dtype": "float32"},
        "generation": {"max_new_tokens": max_new, "temperature": 0.0},
        "timing": {"warmup_samples": 1, "threads": 1},
    }
    return [
        "generate", "--params", json.dumps(params), "--prepared", str(root / "prepared.parquet"),
        "--target-visual", str(root / "target.parquet"), "--draft-visual",
        str(root / "draft.parquet"), "--out", str(out),
    ]  # fmt: skip


def _env(tmp_path, **extra) -> dict:
    return {**os.environ, "MMSPEC_WORKER_DIR": str(tmp_path), "MMSPEC_WORKER_IDLE": "20", **extra}


def _mmspec(argv, env, cwd) -> subprocess.CompletedProcess:
    """The console script, as a Snakemake job runs it."""
    cmd = [str(Path(sys.executable).parent / "mmspec"), *argv]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)


def _worker_pid(stderr: str) -> int:
    line = next(x for x in stderr.splitlines() if x.startswith("mmspec: warm worker"))
    return int(line.split()[3].rstrip(","))


def _workers_of(folder: Path) -> list[int]:
    """The live worker processes whose sockets are under `folder`."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"mmspec.worker" in cmdline and any(str(folder).encode() in a for a in cmdline):
            if proc.name.isdigit() and _alive(int(proc.name)):
                pids.append(int(proc.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().split()[2] != "Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_cells_in_a_warm_worker_equal_fresh_processes(tiny_cell, tmp_path):
    # idle for longer than the cold runs between the warm jobs take on a loaded machine
    env = _env(tmp_path, MMSPEC_WORKER_IDLE="600")
    runs = [("sd_chain", {"gamma": 3}), ("sd_tree", {}), ("sd_chain", {"gamma": 2})]
    pids = []
    for i, (method, hp) in enumerate(runs):
        warm = _mmspec(_argv(tiny_cell, method, tmp_path / f"warm{i}.parquet", **hp), env, tmp_path)
        assert warm.returncode == 0, warm.stderr[-2000:]
        pids.append(_worker_pid(warm.stderr))
        kept = warm.stderr.split("kept from an earlier job: ")[1]
        if i:  # the same target and draft: not loaded again
            assert f"model {tiny_cell[1]}" in kept and f"model {tiny_cell[2]}" in kept, warm.stderr
        else:
            assert kept.strip() == "nothing"
        cold_env = {**env, "MMSPEC_WORKER": "0"}
        cold = _mmspec(
            _argv(tiny_cell, method, tmp_path / f"cold{i}.parquet", **hp), cold_env, tmp_path
        )
        assert cold.returncode == 0, cold.stderr[-2000:]
        assert "warm worker" not in cold.stderr
        assert _deterministic(tmp_path / f"warm{i}.parquet") == _deterministic(
            tmp_path / f"cold{i}.parquet"
        )
    assert len(set(pids)) == 1  # one worker ran the three jobs
    os.kill(pids[0], signal.SIGTERM)


def test_a_failing_job_reports_its_error_and_the_worker_lives_on(tiny_cell, tmp_path):
    env = _env(tmp_path)
    argv = _argv(tiny_cell, "sd_chain", tmp_path / "out.parquet", gamma=3)
    bad = list(argv)
    bad[bad.index("--prepared") + 1] = str(tmp_path / "missing.parquet")
    failed = _mmspec(bad, env, tmp_path)
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()  # the job's one-line error, nothing else
    assert len(lines) == 1 and lines[0].startswith("mmspec generate: error:"), lines
    assert "missing.parquet" in lines[0]
    assert not (tmp_path / "out.parquet").exists()
    usage = _mmspec(["generate", "--out", "x"], env, tmp_path)  # argparse's own exit
    assert usage.returncode == 2 and "required" in usage.stderr
    ok = _mmspec(argv, env, tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ", its job 3;" in ok.stderr  # the worker that ran (and failed) the first two
    os.kill(_worker_pid(ok.stderr), signal.SIGTERM)


def test_a_killed_job_stops_its_worker_before_it_writes(tiny_cell, tmp_path):
    env = _env(tmp_path)
    out = tmp_path / "out.parquet"
    log = tmp_path / "job.log"
    cmd = [str(Path(sys.executable).parent / "mmspec"), *_argv(tiny_cell, "ar", out, max_new=400)]
    with open(log, "w") as err:
        job = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=err)
        deadline = time.time() + 120
        while "generate ar" not in log.read_text() and time.time() < deadline:
            time.sleep(0.02)  # the worker is decoding (its progress bar is in the job's log)
        (pid,) = _workers_of(tmp_path)
        job.send_signal(signal.SIGKILL)
        job.wait()
    assert _wait_gone(pid, 10), "the worker went on with a killed job"
    assert not out.exists()
    # the next job finds the dead worker's socket, starts another and runs
    again = _mmspec(_argv(tiny_cell, "ar", out), env, tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert _worker_pid(again.stderr) != pid and out.exists()
    os.kill(_worker_pid(again.stderr), signal.SIGTERM)


def test_concurrent_jobs_take_separate_workers_and_idle_workers_leave(tiny_cell, tmp_path):
    env = _env(tmp_path, MMSPEC_WORKER_IDLE="1")
    cmd = [str(Path(sys.executable).parent / "mmspec")]
    jobs = [
        subprocess.Popen(
            cmd + _argv(tiny_cell, "ar", tmp_path / f"{i}.parquet", max_new=64),
            env=env,
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    pids = []
    for job in jobs:
        _, err = job.communicate()
        assert job.returncode == 0, err[-2000:]
        pids.append(_worker_pid(err))
    assert pids[0] != pids[1]  # one job per worker at a time
    for pid in pids:
        assert _wait_gone(pid, 15), "an idle worker stayed"
    assert not list(tmp_path.glob("mmspec-workers-*/*.sock"))


def test_no_worker_when_switched_off_or_from_python(tiny_cell, tmp_path, monkeypatch, capsys):
    from mmspec import cli

    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(tmp_path))
    out = tmp_path / "py.parquet"
    assert cli.main(_argv(tiny_cell, "ar", out)) == 0  # Python callers run in their own process
    assert "warm worker" not in capsys.readouterr().err
    assert not list(tmp_path.glob("mmspec-workers-*/*.sock"))
    monkeypatch.setenv("MMSPEC_WORKER", "0")
    assert not worker.enabled()


def test_workers_are_keyed_by_the_settings_a_fresh_process_reads(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    key = worker._key()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert worker._key() != key
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert worker._key() == key
    monkeypatch.chdir(tmp_path.parent)
    assert worker._key() != key


def test_kept_models_reload_when_their_files_change(tmp_path, capsys):
    folder = tiny.save("llava", tmp_path / "m", seed=0)
    cpu = loading.torch.device("cpu")
    loading.keep_loaded(True)
    try:
        first = loading.load_model(str(folder), cpu)
        assert loading.load_model(str(folder), cpu) is first
        loading.release_unused()
        assert loading.load_model(str(folder), cpu) is first  # used by the last job: kept
        loading.release_unused()
        loading.release_unused()  # a job that did not load it: dropped
        assert loading.load_model(str(folder), cpu) is not first
        second = loading.load_model(str(folder), cpu)
        weights = next(folder.glob("*.safetensors"))
        os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
        assert loading.load_model(str(folder), cpu) is not second  # retrained: loaded again
    finally:
        loading.keep_loaded(False)
    assert loading.load_model(str(folder), cpu) is not loading.load_model(str(folder), cpu)


def test_a_toy_model_trained_in_a_warm_worker_equals_a_fresh_process(tiny_cell, tmp_path):
    """Training runs in the worker too (after a generate job there): the same weights, bit for
    bit, as a training in its own process."""
    from safetensors.torch import load_file

    env = _env(tmp_path, MMSPEC_WORKER_IDLE="600")  # as above
    cell = _mmspec(_argv(tiny_cell, "sd_chain", tmp_path / "cell.parquet", gamma=3), env, tmp_path)
    assert cell.returncode == 0, cell.stderr[-2000:]
    spec = {
        "hidden": 32, "layers": 1, "heads": 2, "vision_hidden": 32, "steps": 12,
        "grounding_steps": 4, "batch_size": 4, "lr": 0.002, "image_dropout": 0.5,
        "scenarios": ["toy_caption", "toy_vqa"],
    }  # fmt: skip

    def train(out: Path, environment: dict) -> subprocess.CompletedProcess:
        argv = ["toy_model", "--name", "tiny", "--spec", json.dumps(spec), "--seed", "3"]
        return _mmspec([*argv, "--threads", "1", "--out", str(out)], environment, tmp_path)

    warm = train(tmp_path / "warm", env)
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert _worker_pid(warm.stderr) == _worker_pid(cell.stderr)  # the generate job's worker
    cold = train(tmp_path / "cold", {**env, "MMSPEC_WORKER": "0"})
    assert cold.returncode == 0 and "warm worker" not in cold.stderr, cold.stderr[-2000:]
    a = load_file(tmp_path / "warm" / "model.safetensors")
    b = load_file(tmp_path / "cold" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[key], b[key]) for key in a)
    os.kill(_worker_pid(warm.stderr), signal.SIGTERM)


def test_a_worker_that_closes_without_reading_falls_back_to_this_process(tmp_path, capsys):
    """A job that takes the slot of a worker still exiting (its last client was killed) and
    connects before the socket goes: the worker closes without reading the request, and the
    job runs in its own process instead of failing on the reset."""
    stem = tmp_path / "key-0"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(stem) + ".sock")
    server.listen(1)

    def exiting_worker():
        conn, _ = server.accept()
        time.sleep(0.2)  # the request arrives, unread
        conn.close()

    thread = threading.Thread(target=exiting_worker)
    thread.start()
    assert worker._run_in(stem, ["--version"]) is None
    thread.join()
    server.close()
    assert "the warm worker died during the job; running it in this process" in (
        capsys.readouterr().err
    )
