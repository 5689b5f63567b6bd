"""Another user attacking the folders where warm workers and GPU locks live
(tests/test_folder_swaps.py, tests/test_worker.py): as a process of another uid, it swaps the
worker folder, the GPU lock folder and the folder holding them for links to a folder of its own,
where it listens on sockets under the names a worker's would have, counting whoever connects.
Swaps are atomic exchanges (renameat2 RENAME_EXCHANGE), so the names never go missing: a job
finds either its folder or the attacker's link. Run as root (the tests do): it drops to the
attacker's uid itself.

As a script: `python folder_swaps.py <uid> <gid> <pause> <attacker's folder> <socket name>...
-- <a> <b> ...` swaps each pair (a, b) in turn, waiting up to <pause> seconds after each; it
answers each line on its stdin with the fewest swaps of a pair so far, and at the end of its
stdin prints {"swaps": [n for each pair], "connections": n} as JSON and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ATTACKER = 65534  # nobody
GROUP = 4815  # a group that this user and the attacker share, in the group-writable case
RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: str, b: str, dir_fd: int = -100) -> bool:
    """Swap the names `a` and `b` atomically (relative to `dir_fd`, else the current directory);
    False when the kernel refused (one of them is gone, or no permission)."""
    done = _libc.renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), RENAME_EXCHANGE) == 0
    return done


def swap_and_back(a: str, b: str, dir_fd: int = -100) -> bool:
    """Swap `a` and `b`, leave them swapped a moment (0-3 ms), swap them back; whether it did."""
    if not exchange(a, b, dir_fd):
        return False
    time.sleep(random.uniform(0, 0.003))
    while not exchange(a, b, dir_fd):  # (cannot fail for long: both names exist)
        time.sleep(0.001)
    return True


@contextlib.contextmanager
def folders(kind: str) -> Iterator[tuple[Path, Path]]:
    """(base, the attacker's folder), under a fresh folder of /tmp removed afterwards. `base`
    (for MMSPEC_WORKER_DIR and TMPDIR) holds this user's worker and GPU lock folders and the
    attacker's links to its folder (`swap-workers`, `swap-gpus`); `base` and the folder holding
    it (and the link `swap-base`) are writable by the attacker: by its group (`group-writable`,
    which mmspec trusts to the group) or by every user (`world-writable`, which it refuses)."""
    top = Path(tempfile.mkdtemp(prefix="mm-swap-", dir="/tmp"))
    try:
        top.chmod(0o755)
        evil = top / "evil"
        evil.mkdir()
        os.chown(evil, ATTACKER, ATTACKER)
        evil.chmod(0o777)
        base = top / "parent" / "base"
        base.mkdir(parents=True)
        for folder in (base.parent, base):
            os.chown(folder, os.getuid(), GROUP)
            folder.chmod(0o770 if kind == "group-writable" else 0o777)
        for folder in ("workers", "gpus"):
            (base / f"mmspec-{folder}-{os.getuid()}").mkdir(mode=0o700)
            _attackers_link(base / f"swap-{folder}", evil)
        _attackers_link(base.parent / "swap-base", evil)
        yield base, evil
    finally:
        shutil.rmtree(top)


def _attackers_link(path: Path, target: Path) -> None:
    path.symlink_to(target)
    os.lchown(path, ATTACKER, ATTACKER)


class Attack:
    """The attacker, as another uid: `Attack(uid, gid, folder, sockets, pairs)` plants listening
    sockets named `sockets` in its `folder` and swaps the `pairs` of paths until `stop()`, which
    returns {"swaps": [n for each pair], "connections": n}. Each swap lasts up to 3 ms, and the
    next follows within `pause` seconds."""

    def __init__(
        self, uid: int, gid: int, folder: Path, sockets: list[str], pairs: list, pause=0.003
    ):
        names = [str(p) for pair in pairs for p in pair]
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(uid), str(gid), str(pause), str(folder), *sockets]
            + ["--", *names],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.process.stdout.readline().strip()
        assert ready == "swapping", ready or self.process.wait()

    def swaps(self) -> int:
        """The swaps made so far of the pair swapped least."""
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def stop(self) -> dict:
        out, _ = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, out
        return json.loads(out)


def not_owned_by(folder: Path, uid: int) -> list[str]:
    """Every entry under `folder` (itself excluded) that `uid` does not own: made by someone else
    in the attacker's folder."""
    found = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(path).st_uid != uid:
                    found.append(str(path))
    return found


def _attack(argv: list[str]) -> None:
    uid, gid, pause, folder = int(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    split = argv.index("--")
    sockets, names = argv[4:split], argv[split + 1 :]
    pairs = list(zip(names[::2], names[1::2], strict=True))
    os.setgroups([gid])
    os.setgid(gid)
    os.setuid(uid)  # from here on, the other user
    connections = []
    for name in sockets:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(os.path.join(folder, name))
        server.listen(16)
        threading.Thread(target=_count, args=(server, connections), daemon=True).start()
    stop, swaps = threading.Event(), [0] * len(pairs)
    threading.Thread(target=_answer, args=(swaps, stop), daemon=True).start()
    print("swapping", flush=True)
    while not stop.is_set():
        for i, (a, b) in enumerate(pairs):
            swaps[i] += swap_and_back(a, b)
            time.sleep(random.uniform(0, pause))
    print(json.dumps({"swaps": swaps, "connections": len(connections)}), flush=True)


def _answer(swaps: list[int], stop: threading.Event) -> None:
    for _ in sys.stdin:
        print(min(swaps), flush=True)
    stop.set()


def _count(server: socket.socket, connections: list) -> None:
    while True:
        conn, _ = server.accept()
        connections.append(1)
        conn.close()


if __name__ == "__main__":
    _attack(sys.argv[1:])
