"""A folder that is this user's own, for what other users must not reach: warm workers' sockets
and slot locks (`mmspec.workflow.worker`), and a workstation's GPU locks (`mmspec.workflow.gpus`).

Such folders have predictable names in a shared temp dir (`/tmp/mmspec-workers-<uid>`), so on a
shared node another user can make one first: a socket in it could then be replaced by theirs,
and every lock in it held. A folder is used only when it is a real directory (not a symbolic
link) owned by this user with mode 0700; a missing one is made so. Files in it are made 0600.

A check by path holds only until the path is walked again: another user who can rename entries in
a folder on the way could swap in a folder of theirs between the check and the use. So the folder
is opened once, reached from `/` one folder at a time without following a link blindly, and then
used only through that descriptor: its owner and mode are checked on the opened folder, lock files
are made and opened relative to it (never through a link, and only a regular file of this user's
is used), and sockets are bound and connected at `/proc/self/fd/<fd>/<name>`, a path the kernel
resolves through the open descriptor, whatever has since happened to the folder's path. Every
folder on the way must be one that no other user can rename entries in: owned by this user or
root, and not writable by every user unless it has the sticky bit (as /tmp has). A group-writable
folder is trusted to its group: its members could make a job find a new folder of this user's
(two sets of locks) or a link it refuses, never a folder of theirs.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

MODE = 0o700
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# a FIFO or device in a lock's place must not block the open or become a terminal
_LOCK = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MAX_LINKS = 40  # the kernel's own limit on links followed in one path


class NotPrivate(PermissionError):
    """A folder or lock file that other users could reach, that is not this user's, or that
    mmspec cannot use as one (a link, a folder in a lock's place)."""


class PrivateFolder:
    """An opened folder of this user's own. What is made, locked, bound or connected in it goes
    through the descriptor, so it stays in this folder whatever happens to `path` later."""

    def __init__(self, fd: int, path: Path):
        self.fd = fd
        self.path = path  # for messages only: never walked again

    def lock_file(self, name: str) -> IO:
        """The lock file `name`, made 0600 when missing; NotPrivate (one line naming the file
        and the fix) when something else is in its place: a link, a folder, a FIFO, a socket,
        or a file of another user's."""
        try:
            fd = os.open(name, _LOCK, 0o600, dir_fd=self.fd)
        except OSError as error:
            kind = _kind(name, self.fd)
            problem = f"is {kind}" if kind else f"cannot be opened ({error.strerror})"
            raise NotPrivate(self._not_a_lock(name, problem)) from None
        info = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = f"is {_kind(name, self.fd) or 'not a regular file'}"
        elif info.st_uid != os.getuid():
            problem = f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
        if problem is not None:
            os.close(fd)
            raise NotPrivate(self._not_a_lock(name, problem))
        return os.fdopen(fd, "wb", buffering=0)

    def _not_a_lock(self, name: str, problem: str) -> str:
        return (
            f"{self.path / name} {problem}: only a regular file of this user's is used as a "
            "lock; remove it (mmspec makes it again, mode 0600)"
        )

    def address(self, name: str) -> str:
        """A socket address for `name` in this folder that resolves through the descriptor (in
        this process, and in a child given the descriptor at the same number): 107 bytes fit
        any of mmspec's names, however long the folder's path."""
        return f"/proc/self/fd/{self.fd}/{name}"

    def unlink(self, name: str) -> None:
        """Remove `name` from this folder, when it is there."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PrivateFolder:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def private_folder(base: Path, name: str, instead: str) -> PrivateFolder:
    """`base/name` opened, made with mode 0700 when missing; NotPrivate when it, or a folder on
    the way to it, is not safe from other users. `instead`: what else the user can do, for the
    error."""
    base = Path.cwd() / base  # ("..": the kernel's meaning, after links, not the text's)
    parent = _reach(base, name, instead)
    folder = base / name
    try:
        made = _make(parent, name)
        try:
            fd = _open_folder(name, parent)
        except OSError as error:
            problem = _not_a_folder(name, parent, error)
            raise _refusal(folder, problem, parent, name, instead) from None
    finally:
        os.close(parent)
    info = os.fstat(fd)
    if made and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & ~MODE == 0:
        # the umask takes bits away from 0700 (an odd one, 0277, the owner's): give the owner's
        # back, only to a folder no other user can enter
        os.fchmod(fd, MODE)
        info = os.fstat(fd)
    problem = fault(info)
    if problem is not None:
        os.close(fd)
        raise _refusal(folder, problem, None, None, instead, theirs=info.st_uid != os.getuid())
    return PrivateFolder(fd, folder)


def adopt(fd: int, path: Path) -> PrivateFolder:
    """A folder opened by another process and handed down at descriptor `fd`, checked again (a
    worker trusts its client's descriptor no more than its own)."""
    info = os.fstat(fd)
    problem = "is not a folder" if not stat.S_ISDIR(info.st_mode) else fault(info)
    if problem is not None:
        raise NotPrivate(f"{path} {problem}")
    os.set_inheritable(fd, False)  # not on to what this process runs
    return PrivateFolder(fd, path)


def _open_folder(name: str, parent: int, tries: int = 3) -> int:
    """`name` in `parent` opened as a folder, never through a link; opened again when a link
    was there the moment it was opened and a folder is there now (a swap and back)."""
    for _ in range(tries - 1):
        try:
            return os.open(name, _FOLDER, dir_fd=parent)
        except OSError as error:
            if error.errno not in _LINK_ERRORS or not _is_folder(name, parent):
                raise
    return os.open(name, _FOLDER, dir_fd=parent)


def _make(parent: int, name: str) -> bool:
    try:
        os.mkdir(name, MODE, dir_fd=parent)
    except FileExistsError:
        return False  # made earlier, or by a job starting at the same time: checked like any other
    return True


def _refusal(
    folder: Path,
    problem: str,
    parent: int | None,
    name: str | None,
    instead: str,
    theirs: bool | None = None,
) -> NotPrivate:
    if theirs is None:
        try:
            theirs = os.stat(name, dir_fd=parent, follow_symlinks=False).st_uid != os.getuid()
        except OSError:
            theirs = False
    remedy = (
        "have it removed (its owner or root can)"
        if theirs
        else "remove it (mmspec makes it again, mode 0700)"
    )
    return NotPrivate(
        f"{folder} {problem}: mmspec keeps its sockets and locks only in a folder that is this "
        f"user's own (owned by uid {os.getuid()}, mode 0700), so that other users can neither "
        f"replace nor hold them; {remedy}, or {instead}"
    )


def fault(info: os.stat_result) -> str | None:
    """What makes a folder (its `lstat`) not this user's own ("has mode 0777, not 0700"); None
    when it is."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link, not a folder"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode != MODE:
        return f"has mode {mode:04o}, not 0700"
    return None


def _kind(name: str, parent: int) -> str | None:
    """What `name` in `parent` is when it is neither a regular file nor missing: "a symbolic link
    (to /x)", "a folder", "a FIFO", "a socket", "a device or other special file"."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        try:
            return f"a symbolic link (to {os.readlink(name, dir_fd=parent)})"
        except OSError:
            return "a symbolic link"
    if stat.S_ISREG(info.st_mode):
        return None
    kinds = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}
    return kinds.get(stat.S_IFMT(info.st_mode), "a device or other special file")


def _not_a_folder(name: str, parent: int, error: OSError) -> str:
    kind = _kind(name, parent)
    if kind == "a folder" and error.errno in _LINK_ERRORS:
        return "was replaced while it was opened (by a symbolic link or a file)"
    if kind == "a folder":
        return f"cannot be opened ({error.strerror})"
    if kind is not None and kind.startswith("a symbolic link"):
        return f"is {kind}, not a folder"
    return "is not a folder"


def _reach(base: Path, name: str, instead: str) -> int:
    """A descriptor of the folder `base`, reached from `/` one folder at a time, each checked to
    be one no other user can rename entries in; a link is followed by its text from the checked
    folder that holds it (so `/tmp` -> `private/tmp` works, and nothing is walked twice)."""
    chain = [os.open("/", _FOLDER)]
    where = [Path("/")]
    todo = list(reversed(base.parts[1:]))
    links = 0
    try:
        _check_parent(chain[-1], where[-1], base / name, instead)
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if len(chain) > 1:
                    os.close(chain.pop())
                    where.pop()
                continue
            try:
                fd = os.open(part, _FOLDER, dir_fd=chain[-1])
            except OSError as error:
                target = _link(part, chain[-1]) if error.errno in _LINK_ERRORS else None
                changed = (
                    target is None and error.errno in _LINK_ERRORS and _is_folder(part, chain[-1])
                )
                if target is None and not changed:
                    raise NotPrivate(
                        f"{where[-1] / part} cannot be used for {base / name} "
                        f"({error.strerror}); {instead}"
                    ) from None
                links += 1
                if links > _MAX_LINKS:
                    raise NotPrivate(f"{base}: too many symbolic links; {instead}") from None
                if changed:  # a link when opened, a folder now: open it again (so many times)
                    todo.append(part)
                    continue
                if target.startswith("/"):
                    while len(chain) > 1:
                        os.close(chain.pop())
                        where.pop()
                todo.extend(reversed(target.split("/")))
                continue
            chain.append(fd)
            where.append(where[-1] / part)
            _check_parent(fd, where[-1], base / name, instead)
        return chain.pop()
    finally:
        for fd in chain:
            os.close(fd)


_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR)  # O_NOFOLLOW|O_DIRECTORY on a link (kernels differ)


def _link(name: str, parent: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=parent)
    except OSError:
        return None  # not a link: a file where a folder should be


def _is_folder(name: str, parent: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_parent(fd: int, path: Path, folder: Path, instead: str) -> None:
    """NotPrivate when another user could rename entries in the opened folder `fd` (`path`)."""
    info = os.fstat(fd)
    if info.st_uid not in (0, os.getuid()):
        problem = f"is owned by uid {info.st_uid}"
    elif info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(info.st_mode)
        problem = f"has mode {mode:04o}: every user can write to it, and it has no sticky bit"
    else:
        return
    raise NotPrivate(
        f"{path} {problem}: another user could rename {folder} and put a folder of theirs in its "
        f"place; mmspec keeps its sockets and locks only under folders that no other user can "
        f"rename entries in; {instead}"
    )


def runtime_dir() -> Path | None:
    """The user's runtime directory ($XDG_RUNTIME_DIR, made by the login manager: per user, mode
    0700, on no shared disk) when it is set and this user's own; else None."""
    value = os.environ.get("XDG_RUNTIME_DIR")
    if not value or not os.path.isabs(value):
        return None
    try:
        return Path(value) if fault(os.lstat(value)) is None else None
    except OSError:  # gone (removed at the user's last logout)
        return None
