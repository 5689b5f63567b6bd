"""Warm workers (mmspec.workflow.worker): `mmspec generate` from the command line runs in a
long-lived worker that keeps the models loaded, and writes what a fresh process writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from folder_swaps import ATTACKER, GROUP, Attack, folders, not_owned_by
from test_resume import _deterministic

from mmspec.methods.registry import resolve
from mmspec.models import loading
from mmspec.toy import tiny
from mmspec.workflow import worker
from mmspec.workflow.private_folder import PrivateFolder, private_folder


def _argv(tiny_cell, method: str, out: Path, max_new: int = 8, **hp) -> list[str]:
    root, target, draft = tiny_cell
    spec = resolve(method, hp).to_dict()
    params = {
        "cell": {"dataset": "d", "pair": "p", "method": method, "hp": "h", "seed": 0, "spec": spec},
        "pair": {"target": str(target), "draft": str(draft), "dtype": "float32"},
        "generation": {"max_new_tokens": max_new},
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
        if b"mmspec.cli.worker_process" in cmdline and any(
            str(folder).encode() in a for a in cmdline
        ):
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
    kernels = os.environ.get("ATEN_CPU_CAPABILITY")  # set where a run emulates another CPU
    other = "default" if kernels == "avx2" else "avx2"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", other)  # other kernels, other rounding
    assert worker._key() != key
    if kernels is None:
        monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    else:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", kernels)
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
    folder = private_folder(tmp_path, "w", "")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "w" / "key-0.sock"))
    server.listen(1)

    def exiting_worker():
        conn, _ = server.accept()
        time.sleep(0.2)  # the request arrives, unread
        conn.close()

    thread = threading.Thread(target=exiting_worker)
    thread.start()
    assert worker._run_in(folder, "key-0", ["--version"]) is None
    thread.join()
    server.close()
    folder.close()
    assert "the warm worker died during the job; running it in this process" in (
        capsys.readouterr().err
    )


# --- the folder, the sockets and whose connections are served ---------------------------------

STRANGER = 65534  # nobody


@pytest.fixture
def short_tmp():
    """A folder of a short path: under a long one (pytest's tmp_path can be), the worker folder
    moves to /tmp for the socket path's 107-byte limit."""
    folder = Path(tempfile.mkdtemp(prefix="mm-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder)


def _listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(0.2)
    return server


class _Planted:
    """A listening socket put where a worker's would be, keeping what each connection sends."""

    def __init__(self, path: Path):
        self.server = _listening(path)
        self.heard: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:  # a client waits for a reply: read what comes within a moment
                conn.settimeout(0.5)
                data = b""
                try:
                    while chunk := conn.recv(1 << 16):
                        data += chunk
                except TimeoutError:
                    pass
                self.heard.append(data)

    def close(self) -> list[bytes]:
        """What each connection sent (none: nobody connected)."""
        self.stop.set()
        self.thread.join()
        self.server.close()
        return self.heard


@pytest.fixture
def plant():
    """`plant(path)`: a _Planted socket at `path`, closed after the test even when it fails."""
    planted = []

    def make(path: Path) -> _Planted:
        planted.append(_Planted(path))
        return planted[-1]

    yield make
    for socket_ in planted:
        socket_.close()


def _planted_folder(base: Path, mode: int) -> Path:
    """A worker folder made beforehand by someone else's hand: left writable to others."""
    folder = base / f"mmspec-workers-{os.getuid()}"
    folder.mkdir()
    folder.chmod(mode)
    return folder


@pytest.mark.parametrize("mode", [0o777, 0o750], ids=oct)
def test_a_job_uses_no_worker_folder_that_others_can_write_to(
    short_tmp, monkeypatch, capsys, plant, mode
):
    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(short_tmp))
    folder = _planted_folder(short_tmp, mode)
    planted = plant(folder / f"{worker._key()}-0.sock")
    assert worker.delegate(["generate", "--out", "x"]) is None  # the job runs in its own process
    assert planted.close() == []  # nothing connected, nothing was sent
    assert not list(folder.glob("*.lock"))
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"mmspec: no warm worker, running in this process: {folder} has mode {mode:04o}, not 0700"
    ), line
    assert line.endswith("or set MMSPEC_WORKER_DIR to a folder of your own"), line


def _console_key(env: dict, cwd: Path) -> str:
    """The worker key a `mmspec` job started with `env` in `cwd` computes (its interpreter)."""
    script = Path(sys.executable).parent / "mmspec"
    python = script.read_text().splitlines()[0].removeprefix("#!")
    code = "from mmspec.workflow import worker; print(worker._key())"
    return subprocess.check_output([python, "-c", code], env=env, cwd=cwd, text=True).strip()


def test_a_mmspec_job_sends_nothing_to_a_socket_planted_in_a_foreign_folder(short_tmp, plant):
    """End to end: a generate job from the command line, whose worker folder someone else made
    0777 and put a listening socket in, under the name its worker would have."""
    env = _env(short_tmp)
    folder = _planted_folder(short_tmp, 0o777)
    planted = plant(folder / f"{_console_key(env, short_tmp)}-0.sock")
    job = _mmspec(["generate", "--out", "x"], env, short_tmp)  # argparse's error, in-process
    assert planted.close() == []
    assert job.returncode == 2 and "required" in job.stderr, job.stderr
    assert f"no warm worker, running in this process: {folder} has mode 0777" in job.stderr


def test_workers_live_in_the_runtime_dir_when_it_is_the_users_own(short_tmp, monkeypatch):
    monkeypatch.delenv("MMSPEC_WORKER_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp / "tmp"))
    (short_tmp / "tmp").mkdir()
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    name = f"mmspec-workers-{os.getuid()}"

    def found() -> Path:
        with worker._folder() as folder:
            return folder.path

    assert found() == run / name
    run.chmod(0o755)  # not a runtime dir of this user's alone: the temp dir instead
    assert found() == short_tmp / "tmp" / name
    run.chmod(0o700)
    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(short_tmp / "tmp"))  # the setting comes first
    assert found() == short_tmp / "tmp" / name


def test_the_peer_uid_is_compared_with_this_users():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert worker._stranger(ours) is None
        assert worker._stranger(ours, uid=os.getuid() + 1) == os.getuid()


def _own_worker(stem: Path, rc: int) -> threading.Thread:
    """A stand-in worker of this user's that answers one job with `rc`."""
    server = _listening(Path(f"{stem}.sock"))
    server.settimeout(30)

    def serve():
        conn, _ = server.accept()
        with conn:
            _, fds = worker._receive(conn)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"rc": rc}).encode())
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_slot_locks_are_0600_and_a_worker_of_ones_own_is_used(short_tmp, monkeypatch):
    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(short_tmp))
    folder = short_tmp / f"mmspec-workers-{os.getuid()}"
    folder.mkdir(mode=0o700)
    stem = folder / f"{worker._key()}-0"
    served = _own_worker(stem, rc=7)
    old = os.umask(0)
    try:
        assert worker.delegate(["generate", "--out", "x"]) == 7
    finally:
        os.umask(old)
    served.join()
    assert stat.S_IMODE(os.stat(f"{stem}.lock").st_mode) == 0o600


def _start_worker(base: Path) -> tuple[subprocess.Popen, PrivateFolder, Path]:
    """A worker of slot "w" in the worker folder under `base`: the process, the opened folder
    (its client's) and the slot's stem."""
    folder = private_folder(base, "workers", "")
    stem = base / "workers" / "w"
    started = worker._spawn(folder, "w")
    deadline = time.monotonic() + 120
    while not Path(f"{stem}.sock").exists() and time.monotonic() < deadline:
        assert started.poll() is None, "the worker exited"
        time.sleep(0.05)
    return started, folder, stem


def test_a_workers_socket_is_0600(tmp_path):
    old = os.umask(0)
    try:
        started, folder, stem = _start_worker(tmp_path)
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(f"{stem}.sock").st_mode) == 0o600
    finally:
        started.kill()
        started.wait()
        folder.close()


STRANGE_CLIENT = """
import json, os, socket, struct, sys
request = json.dumps({"argv": ["generate", "--out", "x"], "cwd": "/", "env": {}}).encode()
os.setuid(int(sys.argv[2]))
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(sys.argv[1])
conn.settimeout(20)
reply = b""
try:
    conn.sendall(struct.pack("!Q", len(request)) + request)
    while chunk := conn.recv(4096):
        reply += chunk
except (ConnectionResetError, BrokenPipeError):
    pass
print(repr(reply))
"""


@pytest.mark.skipif(os.getuid() != 0, reason="another uid's process needs root (CI runs as root)")
def test_a_worker_closes_another_users_connection_unread(short_tmp, capfd):
    """A client of another uid that got past the folder and the socket's mode (here: both opened
    up by root after the worker started) gets nothing run and nothing back."""
    started, folder, stem = _start_worker(short_tmp)  # (tmp_path's parents: the user's alone)
    try:
        short_tmp.chmod(0o755)
        stem.parent.chmod(0o755)
        os.chmod(f"{stem}.sock", 0o666)
        stranger = subprocess.run(
            [sys.executable, "-c", STRANGE_CLIENT, f"{stem}.sock", str(STRANGER)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert stranger.returncode == 0, stranger.stderr
        assert stranger.stdout.strip() == "b''"  # unread: no job ran, no exit code came back
        assert started.poll() is None
        assert worker._run_in(folder, "w", ["generate", "--out", "x"]) == 2  # its user's job
        assert "required" in capfd.readouterr().err
    finally:
        started.kill()
        started.wait()
        folder.close()


STRANGE_WORKER = """
import os, socket, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
os.setuid(int(sys.argv[2]))  # the uid a connecting client sees is the one at listen
server.listen(1)
print("listening", flush=True)
conn, _ = server.accept()
conn.settimeout(3)
got = b""
try:
    while chunk := conn.recv(1 << 16):
        got += chunk
except TimeoutError:
    pass
print(len(got), flush=True)
"""


@pytest.mark.skipif(os.getuid() != 0, reason="another uid's process needs root (CI runs as root)")
def test_a_job_sends_nothing_to_a_worker_socket_of_another_user(short_tmp, monkeypatch, capsys):
    """The folder is this user's, but the socket in it is served by another uid (root put it
    there, or the folder was swapped after it was checked): the job keeps its environment."""
    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(short_tmp))
    folder = short_tmp / f"mmspec-workers-{os.getuid()}"
    folder.mkdir(mode=0o700)
    address = folder / f"{worker._key()}-0.sock"
    planted = subprocess.Popen(
        [sys.executable, "-c", STRANGE_WORKER, str(address), str(STRANGER)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert planted.stdout.readline().strip() == "listening"
        assert worker.delegate(["generate", "--out", "x"]) is None
        assert planted.stdout.readline().strip() == "0"  # not a byte of the request
    finally:
        planted.kill()
        planted.wait()
    assert (
        f"mmspec: {address} is served by uid {STRANGER}, not by this user (uid 0); running in "
        "this process" in capsys.readouterr().err
    )


@pytest.mark.skipif(os.getuid() != 0, reason="another uid's process needs root (CI runs as root)")
def test_real_jobs_and_workers_use_nothing_another_user_swaps_in(tiny_cell, tmp_path):
    """End to end: generate jobs from the command line, and the worker they start, while a
    process of another uid swaps the worker folder and the folder holding it (writable by a
    group they share) for links to a folder of its own, listening there under the workers'
    socket names (tests/folder_swaps.py; tests/test_folder_swaps.py does it hundreds of times).
    Each job runs to its end, in this user's worker or in its own process with one line saying
    why; nothing connects to the attacker or is made in its folder."""
    with folders("group-writable") as (base, evil):
        env = _env(base, MMSPEC_WORKER_IDLE="600")
        key = _console_key(env, tmp_path)
        workers = base / f"mmspec-workers-{os.getuid()}"
        attack = Attack(
            ATTACKER,
            GROUP,
            evil,
            [f"{key}-{slot}.sock" for slot in range(4)],
            [(workers, base / "swap-workers"), (base, base.parent / "swap-base")],
            pause=0.03,  # (most jobs start between swaps, and the warm ones are quick)
        )
        warm, jobs = 0, 0
        try:
            while jobs < 3 or not warm:
                assert jobs < 10, "no job ran in a warm worker"
                out = tmp_path / f"{jobs}.parquet"
                job = _mmspec(_argv(tiny_cell, "ar", out), env, tmp_path)
                jobs += 1
                assert job.returncode == 0 and out.exists(), job.stderr[-2000:]
                assert "Traceback" not in job.stderr
                said = [x for x in job.stderr.splitlines() if x.startswith("mmspec: ")]
                if "kept from an earlier job" in job.stderr:
                    warm += 1
                else:
                    (line,) = said
                    assert line.startswith("mmspec: no warm worker, running in this process: ")
        finally:
            counts = attack.stop()
            for pid in _workers_of(base):
                os.kill(pid, signal.SIGTERM)
        assert min(counts["swaps"]) > 0
        assert counts["connections"] == 0
        assert not_owned_by(evil, ATTACKER) == []
