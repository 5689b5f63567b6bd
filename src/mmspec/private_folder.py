"""A folder that is this user's own, for what other users must not reach: warm workers' sockets
(a job sends its worker its whole environment, API keys included) and slot locks
(`mmspec.worker`), and a workstation's GPU locks (`mmspec.gpus`).

Such folders have predictable names in a shared temp dir (`/tmp/mmspec-workers-<uid>`), so on a
shared node another user can make one first: a socket in it could then be replaced by theirs,
and every lock in it held. A folder is used only when it is a real directory (not a symbolic
link) owned by this user with mode 0700; a missing one is made so. Files in it are made 0600.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

MODE = 0o700


class NotPrivate(PermissionError):
    """A folder that other users could write to, or that is not this user's."""


def private_folder(base: Path, name: str, instead: str) -> Path:
    """`base/name`, made with mode 0700 when missing; NotPrivate when it exists and is not this
    user's own. `instead`: what else the user can do, for the error."""
    folder = base / name
    try:
        os.mkdir(folder, MODE)
    except FileExistsError:
        pass  # made earlier, or by a job starting at the same time: checked like any other
    else:
        # the umask only takes bits away from 0700, but an odd one (0277) takes the owner's
        os.chmod(folder, MODE)
    problem = fault(folder)
    if problem is not None:
        raise NotPrivate(
            f"{folder} {problem}: mmspec keeps its sockets and locks only in a folder that is this "
            f"user's own (owned by uid {os.getuid()}, mode 0700), so that other users can neither "
            f"replace nor hold them; {_remedy(folder)}, or {instead}"
        )
    return folder


def fault(folder: Path) -> str | None:
    """What makes `folder` not this user's own ("has mode 0777, not 0700"); None when it is."""
    info = os.lstat(folder)  # a symbolic link's own owner and mode, not its target's
    if stat.S_ISLNK(info.st_mode):
        return f"is a symbolic link (to {os.readlink(folder)}), not a folder"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode != MODE:
        return f"has mode {mode:04o}, not 0700"
    return None


def _remedy(folder: Path) -> str:
    try:
        theirs = os.lstat(folder).st_uid != os.getuid()
    except OSError:
        theirs = False
    if theirs:
        return "have it removed (its owner or root can)"
    return "remove it (mmspec makes it again, mode 0700)"


def runtime_dir() -> Path | None:
    """The user's runtime directory ($XDG_RUNTIME_DIR, made by the login manager: per user, mode
    0700, on no shared disk) when it is set and this user's own; else None."""
    value = os.environ.get("XDG_RUNTIME_DIR")
    if not value or not os.path.isabs(value):
        return None
    try:
        return Path(value) if fault(Path(value)) is None else None
    except OSError:  # gone (removed at the user's last logout)
        return None


def lock_file(path: Path) -> IO:
    """`path` opened for locking: made 0600 when missing, never through a symbolic link."""
    return open(path, "a", opener=_private_opener)  # noqa: SIM115 (the caller holds it)


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o600)
