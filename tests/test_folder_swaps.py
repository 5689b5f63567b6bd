"""Jobs starting while another user swaps their folders (mmspec.workflow.private_folder): warm
workers' folder and slot locks (`worker.delegate`) and a workstation's GPU locks (`gpus.hold`),
hundreds of times, while a process of another uid exchanges the worker folder, the GPU lock folder
and the folder holding both for links to a folder of its own (where it listens under a worker's
socket names), and a process of this user's turns the slot lock and the GPU lock into a link (to a
file of the attacker's folder), a folder or a file of another user's and back. No job may connect to
the attacker's sockets or make anything in its folder, and none may end in a traceback: each is
served by this user's worker (or takes its GPU), or refused with one line.

A stand-in worker of this user's (a thread answering each request with exit code 0) serves the
slot, so that hundreds of jobs take seconds: the path under test is the job's, from its folder to
its connection. tests/test_worker.py runs real jobs and workers under the same attack.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from folder_swaps import ATTACKER, GROUP, Attack, folders, not_owned_by, swap_and_back

from mmspec.workflow import gpus, worker
from mmspec.workflow.private_folder import NotPrivate

JOBS = 300  # worker and GPU jobs together
SWAPS = 200  # the least of each kind: of each folder the attacker swaps, of each lock turned

pytestmark = pytest.mark.skipif(
    os.getuid() != 0, reason="another uid's process needs root (CI runs as root)"
)


class _StandIn:
    """This user's worker of slot 0, answering each request with exit code 0."""

    def __init__(self, address: Path):
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(address))
        self.server.listen(16)
        self.served = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            with conn:
                _, fds = worker._receive(conn)
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"rc": 0}).encode())
            self.served += 1

    def close(self):
        self.server.shutdown(socket.SHUT_RDWR)  # (wakes the accept)
        self.server.close()


def _bad_locks(folder: Path, evil: Path, lock: str) -> list[str]:
    """Names in `folder` of what the lock `lock` is turned into: a link to a file of the
    attacker's folder, a folder, and a file of the attacker's."""
    (folder / lock).touch(mode=0o600)
    (folder / f"{lock}.link").symlink_to(evil / lock)
    (folder / f"{lock}.folder").mkdir()
    (folder / f"{lock}.theirs").touch()
    os.chown(folder / f"{lock}.theirs", ATTACKER, ATTACKER)
    return [f"{lock}.link", f"{lock}.folder", f"{lock}.theirs"]


def _turn_locks(opened: list[tuple[int, str, list[str]]], stop: threading.Event, turns: list):
    """Turn each lock into each of its bad kinds and back until `stop`: (folder's descriptor,
    lock, bad kinds) for each, the folders opened before the attack moves their names."""
    while not stop.is_set():
        for fd, lock, bad in opened:
            turns.append(swap_and_back(lock, random.choice(bad), fd))
            time.sleep(random.uniform(0, 0.003))


REASONS = {  # what a refusal says, for each thing the attack does
    "the folder swapped": ("is a symbolic link", "was replaced while it was opened"),
    "the base swapped": (f"is owned by uid {ATTACKER}: another user could rename",),
    "a lock turned": ("only a regular file of this user's is used as a lock",),
    "a world-writable parent": ("every user can write to it, and it has no sticky bit",),
}


def _reason(text: str) -> str:
    """Why a job was refused (a key of REASONS), or what it said when that is not one line
    giving one of them."""
    lines = text.strip().splitlines()
    for reason, says in REASONS.items():
        if len(lines) == 1 and any(phrase in lines[0] for phrase in says):
            return reason
    return text


@pytest.mark.parametrize("kind", ["group-writable", "world-writable"])
def test_jobs_use_nothing_another_user_swaps_in(kind, monkeypatch):
    with folders(kind) as (base, evil):
        _jobs_under_attack(kind, base, evil, monkeypatch)


def _jobs_under_attack(kind: str, base: Path, evil: Path, monkeypatch) -> None:
    workers = base / f"mmspec-workers-{os.getuid()}"
    locks = base / f"mmspec-gpus-{os.getuid()}"
    monkeypatch.setenv("MMSPEC_WORKER_DIR", str(base))
    monkeypatch.setenv("MMSPEC_WORKER_IDLE", "2")  # (a worker started by mistake leaves soon)
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.setenv(gpus.SHARED, "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # (hold sets it; restored after the test)
    key = worker._key()
    # the slot's name stays the test's: another edit to mmspec's files while it runs would
    # change the key, and the jobs would start real workers
    monkeypatch.setattr(worker, "_key", lambda: key)
    stand_in = _StandIn(workers / f"{key}-0.sock")
    lock_kinds = [
        (os.open(folder, os.O_RDONLY | os.O_DIRECTORY), lock, _bad_locks(folder, evil, lock))
        for folder, lock in ((workers, f"{key}-0.lock"), (locks, "gpu-0.lock"))
    ]
    our_gpu_lock = (locks / "gpu-0.lock").stat().st_ino
    attack = Attack(
        ATTACKER,
        GROUP if kind == "group-writable" else ATTACKER,
        evil,
        [f"{key}-{slot}.sock" for slot in range(4)],
        [
            (workers, base / "swap-workers"),
            (locks, base / "swap-gpus"),
            (base, base.parent / "swap-base"),
        ],
    )
    stop, turns = threading.Event(), []
    turner = threading.Thread(target=_turn_locks, args=(lock_kinds, stop, turns))
    turner.start()
    served, refused, tracebacks, elsewhere = {"worker": 0, "GPU": 0}, {}, [], 0
    job = 0
    try:
        while job < JOBS or attack.swaps() < SWAPS or len(turns) < 2 * SWAPS:
            job += 1
            said, kind_of_job = io.StringIO(), ("GPU", "worker")[job % 2]
            try:
                with contextlib.redirect_stderr(said):
                    if kind_of_job == "worker":
                        rc = worker.delegate(["generate", "--out", "x"])
                    else:
                        rc = 0 if gpus.hold("generate") == "0" else None
                        if rc == 0:  # the lock held is this user's, in this user's folder
                            elsewhere += os.fstat(gpus._held.fileno()).st_ino != our_gpu_lock
                        gpus.release()
                        # (hold points it at the GPU; the worker key is the test's again)
                        os.environ["CUDA_VISIBLE_DEVICES"] = ""
            except NotPrivate as error:  # the GPU job's one-line error
                rc, said = None, io.StringIO(str(error))
            except Exception as error:  # noqa: BLE001 (what the test counts)
                tracebacks.append(repr(error))
                continue
            if rc == 0:
                served[kind_of_job] += 1
            else:
                reason = _reason(said.getvalue()) if rc is None else f"{kind_of_job}: exit {rc}"
                refused[reason] = refused.get(reason, 0) + 1
    finally:
        stop.set()
        turner.join()
        for fd, *_ in lock_kinds:
            os.close(fd)
        counts = attack.stop()
        stand_in.close()
    foreign = not_owned_by(evil, ATTACKER)
    print(
        f"{kind}: {counts['swaps']} swaps of the worker folder, the GPU lock folder and their "
        f"base, {sum(turns)} lock turns, {job} jobs; served: "
        f"{served}; refused: {refused}; {counts['connections']} connections to the attacker's "
        f"sockets, {len(foreign)} files made in its folder, {elsewhere} GPU locks held elsewhere, "
        f"{len(tracebacks)} tracebacks"
    )
    assert min(counts["swaps"]) >= SWAPS and len(turns) >= 2 * SWAPS and all(turns)
    assert counts["connections"] == 0
    assert foreign == []
    assert tracebacks == []
    assert elsewhere == 0
    assert stand_in.served == served["worker"]  # each job served was served by this user's
    assert set(refused) <= set(REASONS), refused  # each refusal one line saying why
    if kind == "world-writable":  # every job refused before anything is made
        assert served == {"worker": 0, "GPU": 0} and set(refused) == {"a world-writable parent"}
    else:  # jobs started while the folders were the attacker's, and between
        assert served["worker"] and served["GPU"] and refused
