"""The GPUs of a workstation: every GPU busy, one job each.

Run locally (`snakemake --cores all`, no cluster executor), the workflow finds the machine's GPUs
(`share_local`, at parse time) and registers the Snakemake resource `gpu` at their number, so at
most one GPU job per GPU runs at once while CPU stages fill the other cores. Snakemake does not say
which GPU a job gets: each GPU job (of a stage declaring `GPU = True`, `mmspec.stages`) takes a free
one itself (`hold`), an exclusive lock on `<tmp>/mmspec-gpus-<uid>/gpu-<id>.lock` held until its
process exits (a kill included), and runs with CUDA_VISIBLE_DEVICES=<id>, so it sees that GPU alone
as cuda:0 (and a warm worker of that GPU: the variable keys workers). Two sweeps on one machine
share the locks, so their jobs never double up on a GPU either. With no GPU nothing changes; under
Slurm, Slurm assigns each job its GPU and nothing here runs.

The lock folder must be this user's own (`mmspec.workflow.private_folder`): one that another user
made first (all of its locks theirs to hold) fails the job with an error saying what to do, and so
does a lock file that is not a regular file of this user's (a link, a folder), naming it. So does a
temp dir that another user could rename entries in (not /tmp, which has the sticky bit, but a
`TMPDIR` that every user can write to, or that is inside another user's folder): they could then
swap the lock folder, and two jobs would find two sets of locks. Then set `TMPDIR`, for every sweep
of this machine, to one folder of your own. The folder is opened and checked once, and the locks are
made and opened through that descriptor, so a swap after the check changes nothing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from mmspec import commands
from mmspec.workflow.private_folder import PrivateFolder, private_folder

# The GPUs a run's jobs share ("0,1,2"), set by the workflow for its jobs.
SHARED = "MMSPEC_LOCAL_GPUS"
# Overrides detection: a number of GPUs or their ids, e.g. to leave some GPUs out ("0,1"), or to
# simulate GPUs on a machine without (the jobs then run on the CPU, each holding a GPU's lock).
DECLARED = "MMSPEC_GPUS"
WAIT_S = 0.5  # between looks for a free GPU when every one is held (by another sweep)

_held = None  # the lock file this process holds (open until it exits)


def visible() -> list[str]:
    """Ids of the GPUs this process may use: `MMSPEC_GPUS`, else CUDA_VISIBLE_DEVICES, else what
    `nvidia-smi -L` lists (no torch import: the workflow calls this at parse time)."""
    declared = os.environ.get(DECLARED)
    if declared is not None:
        return _ids(declared, DECLARED, count_allowed=True)
    restricted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if restricted is not None:
        return [] if restricted.strip() in ("", "-1") else _ids(restricted, "CUDA_VISIBLE_DEVICES")
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listed = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listed.splitlines()) if line.startswith("GPU ")]


def _ids(text: str, source: str, count_allowed: bool = False) -> list[str]:
    text = text.strip()
    if count_allowed and text.isdigit():
        return [str(i) for i in range(int(text))]
    ids = [part.strip() for part in text.split(",") if part.strip()]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source}={text!r} names a GPU twice")
    return ids


def share_local(workflow) -> list[str]:
    """At parse time: with local execution and GPUs, register the resource `gpu` at their
    number (unless `--resources gpu=N` set it) and hand their ids to the jobs; the ids."""
    if not workflow.local_exec:
        return []  # a cluster (Slurm) assigns GPUs to its jobs
    ids = visible()
    if not ids:
        return []
    os.environ[SHARED] = ",".join(ids)
    if "gpu" not in workflow.global_resources:
        workflow.register_resource("gpu", len(ids))
    slots = workflow.global_resources["gpu"]
    slots = getattr(slots, "value", slots)
    print(
        f"mmspec: GPUs {','.join(ids)}: at most {slots} GPU jobs at once, each on a GPU of its own",
        file=sys.stderr,
    )
    return ids


def unshare_for_cluster(local_execution: bool) -> None:
    """At the run's start, once the executor is known (at parse time Snakemake reports every
    run as local): under a cluster executor, drop the ids `share_local` handed to the jobs, as
    sbatch exports this environment to them, and a job would then lock this host's GPU ids on
    its node instead of the GPU Slurm gave it."""
    if not local_execution and os.environ.pop(SHARED, None) is not None:
        print("mmspec: cluster executor: the scheduler assigns GPUs, not mmspec", file=sys.stderr)


def _lock_folder() -> PrivateFolder:
    """`<tmp>/mmspec-gpus-<uid>`, opened, this user's own (else NotPrivate: the job fails, as
    nothing else keeps two jobs off one GPU). Not $XDG_RUNTIME_DIR, where workers live: every job of
    every sweep must find the same locks, and that variable is set in some sessions and not in
    others (cron, su), and its folder goes at the user's last logout, with a sweep still running."""
    return private_folder(
        Path(tempfile.gettempdir()),
        f"mmspec-gpus-{os.getuid()}",
        "run every sweep of this machine with TMPDIR set to one folder of your own",
    )


def hold(stage: str) -> str | None:
    """In a GPU job of a workflow that shares local GPUs: take a free GPU (waiting while every
    one is held), point CUDA_VISIBLE_DEVICES at it for the rest of the job, and say so on stderr
    (the job's log); its id. None (nothing done) for other jobs."""
    shared = os.environ.get(SHARED)
    if not shared or _held is not None:
        return None
    declared = commands.declared().get(stage)
    if declared is None or not declared.gpu:
        return None
    ids = _ids(shared, SHARED)
    with _lock_folder() as folder:
        return _take(folder, ids, shared)


def _take(folder: PrivateFolder, ids: list[str], shared: str) -> str:
    """The first free GPU of `ids`, its lock in `folder` held (`_held`) until release or exit."""
    global _held
    waited = False
    while True:
        for gpu in ids:
            lock = folder.lock_file(f"gpu-{gpu}.lock")  # held until exit; NotPrivate if not a lock
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            _held = lock
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            print(
                f"mmspec: GPU {gpu} of {shared} held from {datetime.now().isoformat()}",
                file=sys.stderr,
                flush=True,
            )
            return gpu
        if not waited:
            print(f"mmspec: every GPU of {shared} is held; waiting", file=sys.stderr, flush=True)
            waited = True
        time.sleep(WAIT_S)


def release() -> None:
    """Let the held GPU go (the end of the process does it too) and say when."""
    global _held
    if _held is None:
        return
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(
        f"mmspec: GPU {gpu} released at {datetime.now().isoformat()}", file=sys.stderr, flush=True
    )
    _held.close()
    _held = None
