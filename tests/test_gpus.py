"""A workstation's GPUs: at most one GPU job per GPU, each on a free GPU of its own.

The machine has no GPU, so the tests declare some (`MMSPEC_GPUS`): the workflow then limits and
assigns GPU jobs exactly as on a real workstation, and the jobs (which find no CUDA) run on the
CPU. Each GPU job's log says which GPU it held and from when to when.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from workflow_cli import ROOT, snakemake_cmd

from mmspec.workflow import gpus

TINY = ROOT / "tests" / "configs" / "tiny.yaml"
HELD = re.compile(r"mmspec: GPU (\S+) of \S+ held from (\S+)")
RELEASED = re.compile(r"mmspec: GPU (\S+) released at (\S+)")


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"MMSPEC_GPUS": "3"}, ["0", "1", "2"]),
        ({"MMSPEC_GPUS": "1,3"}, ["1", "3"]),
        ({"MMSPEC_GPUS": "0"}, []),
        ({"CUDA_VISIBLE_DEVICES": "2,5"}, ["2", "5"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, []),
    ],
)
def test_visible_gpus_follow_the_declaration_then_cuda_visible_devices(env, expected, monkeypatch):
    monkeypatch.delenv("MMSPEC_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert gpus.visible() == expected


HOLDER = """
import sys, time
from mmspec.workflow import gpus
gpu = gpus.hold("generate")
print(gpu, flush=True)
time.sleep(float(sys.argv[1]))
"""


def _holder(seconds: float, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(seconds)], stdout=subprocess.PIPE, text=True, env=env
    )


def test_each_job_takes_a_free_gpu_and_waits_while_every_one_is_held(tmp_path):
    env = {**os.environ, gpus.SHARED: "0,1", "TMPDIR": str(tmp_path)}
    first, second = _holder(3, env), _holder(3, env)
    taken = {first.stdout.readline().strip(), second.stdout.readline().strip()}
    assert taken == {"0", "1"}
    started = time.monotonic()
    third = _holder(0, env)  # both held: it waits for the first to leave
    gpu = third.stdout.readline().strip()
    assert gpu in taken and time.monotonic() - started > 1.0
    for process in (first, second, third):
        process.wait(timeout=30)


def test_a_job_outside_a_gpu_sharing_workflow_takes_nothing(monkeypatch):
    monkeypatch.delenv(gpus.SHARED, raising=False)
    assert gpus.hold("generate") is None
    monkeypatch.setenv(gpus.SHARED, "0")
    assert gpus.hold("score") is None  # a CPU stage


def test_a_cluster_run_hands_its_jobs_no_local_gpu_ids(monkeypatch, capsys):
    """At parse time every run looks local; at its start a cluster run drops the ids, which
    sbatch would otherwise export to its jobs."""
    monkeypatch.setenv(gpus.SHARED, "0,1")
    gpus.unshare_for_cluster(local_execution=True)
    assert os.environ[gpus.SHARED] == "0,1"
    gpus.unshare_for_cluster(local_execution=False)
    assert gpus.SHARED not in os.environ
    assert "the scheduler assigns GPUs" in capsys.readouterr().err


def _intervals(workdir: Path) -> list[tuple[str, datetime, datetime, str]]:
    """(GPU, held from, released at, log) of every GPU job that ran in `workdir`."""
    found = []
    for log in (workdir / "logs").rglob("*.log"):
        text = log.read_text()
        held, released = HELD.search(text), RELEASED.search(text)
        if held is None:
            continue
        assert released is not None and released[1] == held[1], log
        start, end = datetime.fromisoformat(held[2]), datetime.fromisoformat(released[2])
        found.append((held[1], start, end, log.relative_to(workdir).as_posix()))
    return found


def _overlapping(intervals) -> list[tuple]:
    pairs = []
    for i, a in enumerate(intervals):
        for b in intervals[i + 1 :]:
            if a[1] < b[2] and b[1] < a[2]:
                pairs.append((a, b))
    return pairs


@pytest.mark.slow
def test_a_workstation_runs_one_gpu_job_per_gpu_and_every_gpu_works(tmp_path):
    config = yaml.safe_load(TINY.read_text())
    config.pop("judge")  # no judge: the GPU jobs are what this run is about
    config["datasets"]["toy_caption"].pop("judge")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(config))
    # its own lock folder: a GPU lock another run on this machine holds is not this test's
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "MMSPEC_GPUS": "2", "TMPDIR": str(tmp_path / "tmp")}
    # up to the cells' scores: the summary and report are CPU jobs, and their own tests'
    cmd = snakemake_cmd(tmp_path, tmp_path / "sweep.yaml", "--until", "score", cores=4)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "mmspec: GPUs 0,1: at most 2 GPU jobs at once" in out.stderr
    jobs = _intervals(tmp_path)
    # the target's and draft's visual caches, the captions and the six cells
    assert len(jobs) == 9 and {rule.split("/")[1] for *_, rule in jobs} == {
        "cache_visual",
        "caption",
        "generate",
    }
    for gpu in ("0", "1"):
        on_gpu = [j for j in jobs if j[0] == gpu]
        assert on_gpu and not _overlapping(on_gpu), gpu  # never two jobs on one GPU
    assert _overlapping(jobs)  # ... and both GPUs busy at once
    # Snakemake started no GPU job while both GPUs were held (none had to wait for one)
    logs = (tmp_path / "logs").rglob("*.log")
    waited = [log.relative_to(tmp_path).as_posix() for log in logs if "waiting" in log.read_text()]
    assert not waited, (waited, sorted(jobs, key=lambda j: j[1]))

    # one GPU: the GPU jobs run one after another (the cells' samples deleted: decoded again)
    env["MMSPEC_GPUS"] = "1"
    for log in (tmp_path / "logs").rglob("*.log"):
        log.unlink()
    for samples in (tmp_path / "results" / "generate").rglob("samples.parquet"):
        samples.unlink()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = _intervals(tmp_path)
    assert len(jobs) == 6 and {j[0] for j in jobs} == {"0"} and not _overlapping(jobs)


def _gpu_job(tmpdir: Path) -> subprocess.CompletedProcess:
    """A GPU job from the command line, in a workflow sharing GPU 0, with TMPDIR=`tmpdir`."""
    env = {**os.environ, gpus.SHARED: "0", "TMPDIR": str(tmpdir), "MMSPEC_WORKER": "0"}
    env.pop("MMSPEC_TRACEBACK", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "mmspec"), "generate", "--out", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("mode", [0o777, 0o750], ids=oct)
def test_a_gpu_job_fails_on_a_lock_folder_others_can_write_to(tmp_path, mode):
    """Another user who made the lock folder first could hold every GPU's lock, or free one
    that a job holds: the job stops with an error saying so, rather than share a GPU."""
    folder = tmp_path / f"mmspec-gpus-{os.getuid()}"
    folder.mkdir()
    folder.chmod(mode)
    job = _gpu_job(tmp_path)
    assert job.returncode == 1
    (line,) = job.stderr.splitlines()  # the job's one-line error, before any GPU is held
    assert line.startswith(
        f"mmspec generate: error: {folder} has mode {mode:04o}, not 0700: mmspec keeps"
    ), line
    assert line.endswith(
        "remove it (mmspec makes it again, mode 0700), or run every sweep of this machine with "
        "TMPDIR set to one folder of your own"
    ), line
    assert not list(folder.iterdir())


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo"])
def test_a_gpu_job_fails_on_a_lock_that_is_not_a_file_of_its_own(tmp_path, kind):
    """Something else in a GPU lock's place (put there by this user's hand, or by root): one
    line naming it and the fix, not a traceback, and nothing made where a link points."""
    folder = tmp_path / f"mmspec-gpus-{os.getuid()}"
    folder.mkdir(mode=0o700)
    lock = folder / "gpu-0.lock"
    said = {"symlink": f"a symbolic link (to {tmp_path / 'elsewhere'})", "folder": "a folder"}
    if kind == "symlink":
        lock.symlink_to(tmp_path / "elsewhere")
    elif kind == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)  # (an open that waited for a reader would hang the job)
    job = _gpu_job(tmp_path)
    assert job.returncode == 1
    assert job.stderr.splitlines() == [
        f"mmspec generate: error: {lock} is {said.get(kind, 'a FIFO')}: only a regular file of "
        "this user's is used as a lock; remove it (mmspec makes it again, mode 0600)"
    ]
    assert not (tmp_path / "elsewhere").exists()


def test_a_gpu_job_fails_under_a_temp_dir_every_user_can_write_to(tmp_path):
    """Without the sticky bit (that /tmp has), another user could swap the lock folder between
    two jobs, which would then hold the same GPU's locks in two folders."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    job = _gpu_job(shared)
    assert job.returncode == 1
    assert job.stderr.splitlines() == [
        f"mmspec generate: error: {shared} has mode 0777: every user can write to it, and it has "
        f"no sticky bit: another user could rename {shared / f'mmspec-gpus-{os.getuid()}'} and "
        "put a folder of theirs in its place; mmspec keeps its sockets and locks only under "
        "folders that no other user can rename entries in; run every sweep of this machine "
        "with TMPDIR set to one folder of your own"
    ]
    assert not list(shared.iterdir())
    shared.chmod(0o1777)  # as /tmp: the job takes its GPU (and fails on its arguments)
    job = _gpu_job(shared)
    assert job.returncode == 2 and "mmspec: GPU 0 of 0 held from" in job.stderr, job.stderr


def test_a_gpu_lock_is_made_0600_in_a_folder_made_0700(tmp_path, monkeypatch):
    monkeypatch.setattr(gpus.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(gpus.SHARED, "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # (hold sets it; restored after the test)
    old = os.umask(0)
    try:
        assert gpus.hold("generate") == "0"
    finally:
        os.umask(old)
        gpus.release()
    folder = tmp_path / f"mmspec-gpus-{os.getuid()}"
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / "gpu-0.lock").st_mode) == 0o600
