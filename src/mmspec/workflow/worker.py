"""Warm workers: a `mmspec generate` job (or of another stage declaring `WARM = True`,
`mmspec.stages`) hands its command line to a long-lived worker process that has torch and
transformers imported and keeps the last job's models loaded.

A generate job otherwise spends most of a toy cell's time starting up (imports, model loading)
and, on a cluster, loads a multi-GB target once per cell. Here the job is a thin client: it takes
one of the numbered slots of its machine and working directory (a lock file held while it runs),
connects to the slot's worker (spawning it if there is none), passes it its stdin/stdout/stderr,
environment and arguments, and exits with the worker's exit code. Slots keep concurrent jobs
apart, so a worker runs one job at a time and timings stay those of one process per core. The
worker runs the job exactly as a fresh process would; the outputs are the same
(tests/test_worker.py). A worker exits after `MMSPEC_WORKER_IDLE` seconds without a job
(default 30), and at once when its job's client dies (Snakemake killed it, or the user), so a
cancelled job never keeps writing. `MMSPEC_WORKER=0` runs every job in its own process.

Within a packed Slurm job (slurm/config.yaml: a group of generate cells on one GPU) the group's
cells run one after another on one slot, so the models shared by its cells load once.

Workers live only in a folder of this user's own (`mmspec.workflow.private_folder`; a job whose
folder is not, or whose slot lock is not a lock file of this user's, runs in its own process, with a
line on stderr saying why). The client opens and checks the folder once and reaches its locks and
sockets only through that descriptor; the worker it spawns inherits the descriptor, checks it again,
and binds its socket (0600 from the start) through it. Each side checks the other's uid on every
connection (SO_PEERCRED, recorded by the kernel at connect and at listen) before it sends or reads a
byte.

A job's request carries its whole environment (API keys, HF_TOKEN included), and it goes only to
a process of this uid. That reveals nothing: any process of this uid can already read the job's
environment (`/proc/<pid>/environ`, readable by the same uid), its files and the shell profile
the keys come from. What could not run under this uid never gets a byte: the address resolves
through the checked folder, and the peer's uid is checked on the connected socket. Sending only
what a job needs is not possible: a plugin may read any variable, and a warm job must see exactly
what a fresh process would.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mmspec.plugins import import_closure
from mmspec.workflow.private_folder import NotPrivate, PrivateFolder, private_folder, runtime_dir

IDLE_S = 30.0  # a worker's life without a job (MMSPEC_WORKER_IDLE overrides)
START_S = 300.0  # the longest a client waits for a new worker to listen (imports)
SLOTS = 256
# the environment that decides what a worker computes: jobs differing here get other workers
KEYED_ENV = (
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTORCH_CUDA_ALLOC_CONF",
    "SLURM_JOB_ID", "MMSPEC_TRACEBACK", "PYTHONPATH",
    # the CPU kernels torch, MKL and oneDNN pick (read once, at import): their rounding
    "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
)  # fmt: skip
_HEADER = struct.Struct("!Q")


def enabled() -> bool:
    """Warm workers are on, and this platform can tell whose a connection is (SO_PEERCRED) and
    reach a socket through an open folder (/proc/self/fd): Linux; elsewhere (macOS) every job
    runs in its own process."""
    return (
        os.environ.get("MMSPEC_WORKER", "1") != "0"
        and hasattr(socket, "SO_PEERCRED")
        and os.path.isdir("/proc/self/fd")
    )


def delegate(argv: list[str]) -> int | None:
    """Run `mmspec <argv>` in a warm worker; its exit code, or None to run it in this process
    (no slot free, or a worker could not start or died: a line on stderr says which)."""
    key = _key()
    try:
        folder = _folder()
    except OSError as error:  # a worker only saves time: the job runs, and says why not there
        return _in_this_process(error)
    with folder:
        for slot in range(SLOTS):
            try:
                lock = folder.lock_file(f"{key}-{slot}.lock")  # held across the job
            except NotPrivate as error:
                return _in_this_process(error)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            try:
                return _run_in(folder, f"{key}-{slot}", argv)
            finally:
                lock.close()  # releases the slot
    return None


def _in_this_process(error: OSError) -> None:
    print(f"mmspec: no warm worker, running in this process: {error}", file=sys.stderr)


def _folder() -> PrivateFolder:
    """The folder of this user's workers, opened: under MMSPEC_WORKER_DIR, else the runtime
    directory ($XDG_RUNTIME_DIR), else the temp dir; NotPrivate when it is not this user's own.
    (Its path may be of any length: sockets are reached through the descriptor.)"""
    name = f"mmspec-workers-{os.getuid()}"
    base = Path(os.environ.get("MMSPEC_WORKER_DIR") or runtime_dir() or tempfile.gettempdir())
    return private_folder(base, name, "set MMSPEC_WORKER_DIR to a folder of your own")


def _key() -> str:
    """Workers are per working directory, Python, code and keyed environment: a worker never
    runs a job with other code or settings than a fresh process would."""
    parts = [os.getcwd(), _fixed_code or _code(), [os.environ.get(k) for k in KEYED_ENV]]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _code() -> list:
    """The code a job runs: mmspec's files, the installed plugins (their entry points,
    versions, and the source of every module their modules import: `import_closure`) and the
    installed distributions (a pip install or upgrade), so a job whose code changed since a
    worker started gets a fresh worker."""
    package = Path(__file__).resolve().parents[1]
    stamp = sorted((str(p), p.stat().st_mtime_ns) for p in package.rglob("*.py"))
    # every module of the plugins' packages, and what they import: a superset of what a job
    # can run (a module a plugin imports by name included)
    modules = import_closure.plugin_modules() + import_closure.plugin_package_modules()
    plugins = import_closure.closure(modules)
    return [sys.executable, stamp, import_closure.plugin_stamp(), plugins.digest(), _installed()]


_fixed_code: list | None = None


@contextlib.contextmanager
def code_read_once() -> Iterator[None]:
    """Within it, the code part of a worker's key is read once, not per job (a quarter of a
    second: every installed distribution's metadata): a batch job's cells run the code found
    when it started, as one process running them all would."""
    global _fixed_code
    _fixed_code = _code()
    try:
        yield
    finally:
        _fixed_code = None


def _installed() -> list[str]:
    """The distributions installed on sys.path, as their metadata folders' names (which carry
    their versions): a pip install, upgrade or removal changes it."""
    found = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found += [n for n in names if n.endswith((".dist-info", ".egg-info", ".egg-link"))]
    return sorted(found)


def _run_in(folder: PrivateFolder, stem: str, argv: list[str]) -> int | None:
    address = folder.address(f"{stem}.sock")
    try:
        conn = _connect(address)
        if conn is None:
            worker = _spawn(folder, stem)
            deadline = time.monotonic() + START_S
            while conn is None and worker.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
                conn = _connect(address)
            if conn is None:
                worker.kill()
                print("mmspec: the warm worker did not start; running in this process",
                      file=sys.stderr)  # fmt: skip
                return None
    except OSError as error:  # something not a worker's socket in its place (ELOOP, EACCES)
        print(f"mmspec: no warm worker at {folder.path / stem}.sock ({error.strerror}); "
              "running in this process", file=sys.stderr)  # fmt: skip
        return None
    reply = b""
    with conn:
        # the request carries this job's environment: only to a process of this user's
        if (uid := _stranger(conn)) is not None:
            print(
                f"mmspec: {folder.path / stem}.sock is served by uid {uid}, not by this user "
                f"(uid {os.getuid()}); running in this process",
                file=sys.stderr,
            )
            return None
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)})
        payload = request.encode()
        try:
            socket.send_fds(conn, [_HEADER.pack(len(payload)) + payload], [0, 1, 2])
            while chunk := conn.recv(4096):
                reply += chunk
        except (ConnectionResetError, BrokenPipeError):
            # the slot's worker was exiting as this job took the slot (its last client was
            # killed): it closed without reading the request
            reply = b""
    if not reply:
        print("mmspec: the warm worker died during the job; running it in this process",
              file=sys.stderr)  # fmt: skip
        return None
    return int(json.loads(reply)["rc"])


def _stranger(conn: socket.socket, uid: int | None = None) -> int | None:
    """The uid of the process at the other end of `conn` when it is not `uid` (this process's);
    None when it is. The kernel records it at connect (a client) or listen (a worker)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    _pid, peer, _gid = struct.unpack("iII", creds)
    return None if peer == (os.getuid() if uid is None else uid) else peer


def _connect(address: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
        return conn
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None


def _spawn(folder: PrivateFolder, stem: str) -> subprocess.Popen:
    """A worker in its own session (Snakemake does not wait for it), with no inherited pipes,
    given the opened folder at the same descriptor (its path follows, for `ps` only)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mmspec.cli.worker_process", str(folder.fd), stem, str(folder.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        pass_fds=[folder.fd],
    )


def serve(folder: PrivateFolder, stem: str, run: Callable[..., int]) -> None:
    """The worker of the slot `stem` (its socket `<stem>.sock`, its lock `<stem>.lock` in
    `folder`): import what jobs need, then run one job per connection until idle, each by
    `run(argv, warm=False)` (the command line's `main`: `mmspec.cli.worker_process`)."""
    from mmspec.models import loading

    idle = float(os.environ.get("MMSPEC_WORKER_IDLE", IDLE_S))
    name = f"{stem}.sock"
    folder.unlink(name)  # a dead worker's socket
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # the folder (0700) keeps other users out; the socket's own mode is a second guard, 0600
    # from its creation (no thread runs yet to be affected by the umask)
    umask = os.umask(0o177)
    try:
        server.bind(folder.address(name))
    finally:
        os.umask(umask)
    server.listen(1)
    server.settimeout(idle)
    jobs, stage = 0, None
    loading.keep_loaded(True)
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if _no_client(folder, f"{stem}.lock"):  # no job holds or waits on this slot: leave
                folder.unlink(name)
                return
            continue
        if _stranger(conn) is not None:  # another user's: not a byte of it is read
            conn.close()
            continue
        with conn:
            conn.settimeout(None)
            request, fds = _receive(conn)
            if request["argv"][:1] != [stage]:  # another stage's models leave memory first
                loading.release_all()
                stage = request["argv"][0]
            jobs += 1
            rc = _serve_one(conn, request, fds, run, loading, jobs, lambda: folder.unlink(name))
            conn.sendall(json.dumps({"rc": rc}).encode())
            conn.shutdown(socket.SHUT_RDWR)  # the end of the reply, and wakes the watcher
        loading.release_unused()


def _no_client(folder: PrivateFolder, lock: str) -> bool:
    try:
        held = folder.lock_file(lock)
    except NotPrivate:  # not a lock of this user's any more: no client can take the slot
        return True
    with held as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True  # the socket is removed before this lock is released (on close)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A client's request (argv, cwd, env) and its stdin/stdout/stderr."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = _HEADER.unpack(data[: _HEADER.size])[0]
    data = data[_HEADER.size :]
    while len(data) < size:
        data += conn.recv(size - len(data))
    return json.loads(data), fds


def _serve_one(
    conn: socket.socket,
    request: dict,
    fds: list[int],
    run: Callable[..., int],
    loading,
    job: int,
    unlink: Callable[[], None],
) -> int:
    """Run one job with the client's stdio, environment and directory, then restore ours."""
    done = threading.Event()
    watcher = threading.Thread(target=_exit_with_client, args=(conn, done, unlink), daemon=True)
    watcher.start()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    env, cwd = dict(os.environ), os.getcwd()
    for fd, theirs in enumerate(fds):
        os.dup2(theirs, fd)
        os.close(theirs)
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        os.chdir(request["cwd"])
        rc = run(request["argv"], warm=False)
        kept = loading.reused()
        if rc == 0:  # (a failed job's log stays its one-line error)
            print(
                f"mmspec: warm worker {os.getpid()}, its job {job}; kept from an earlier job: "
                + (", ".join(kept) or "nothing"),
                file=sys.stderr,
            )
        return rc
    except SystemExit as stop:  # argparse's usage errors
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:  # noqa: BLE001 (the job's failure is reported, the worker lives on)
        import traceback

        traceback.print_exc()
        return 1
    finally:
        done.set()
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, ours in enumerate(saved):
            os.dup2(ours, fd)
            os.close(ours)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)


def _exit_with_client(
    conn: socket.socket, done: threading.Event, unlink: Callable[[], None]
) -> None:
    """A client sends nothing after its request: end of stream before the job is done means it
    died (killed with its job), and the job it asked for must not go on writing."""
    try:
        if conn.recv(1, socket.MSG_PEEK) == b"" and not done.is_set():
            # The socket's name goes first, so the next client starts a new worker instead of
            # connecting to this one as it exits (seen: the next job's connection accepted by
            # nobody, its reply empty, about one run in five of test_worker's kill test).
            unlink()
            os._exit(1)
    except OSError:
        return  # closed: the job finished and its reply went out
