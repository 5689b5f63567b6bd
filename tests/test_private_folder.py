"""A folder of this user's own (mmspec.workflow.private_folder), where warm workers and GPU locks
live: made 0700 when missing, used when it is a real folder of this user's with mode 0700 under
folders no other user can rename entries in, refused otherwise with an error naming the folder, what
is wrong and what to do; and once opened, used only through its descriptor."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from mmspec.workflow.private_folder import NotPrivate, adopt, private_folder, runtime_dir

INSTEAD = "set MMSPEC_WORKER_DIR to a folder of your own"
OTHER_UID = 65534  # nobody


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _foreign_folder(tmp_path: Path) -> tuple[Path, str, int]:
    """(base, name, owner) of an existing folder owned by another user: one made and given to
    nobody where the tests run as root (CI), else `/` itself, which is root's."""
    if os.getuid() == 0:
        folder = tmp_path / "theirs"
        folder.mkdir(mode=0o700)
        os.chown(folder, OTHER_UID, OTHER_UID)
        return tmp_path, "theirs", OTHER_UID
    return Path("/"), "", 0


@pytest.mark.parametrize("umask", [0, 0o022, 0o077, 0o277], ids=oct)
def test_a_missing_folder_is_made_0700_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        private_folder(tmp_path, "mine", INSTEAD).close()
    finally:
        os.umask(old)
    folder = tmp_path / "mine"
    assert stat.S_ISDIR(os.lstat(folder).st_mode) and _mode(folder) == 0o700
    assert os.lstat(folder).st_uid == os.getuid()


def test_an_existing_folder_of_this_users_own_is_used_as_it_is(tmp_path):
    """What a job finds when another job made the folder first, a moment or a week earlier."""
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "mine" / "a.lock").touch()
    with private_folder(tmp_path, "mine", INSTEAD) as folder:
        assert folder.path == tmp_path / "mine"
        assert os.path.samestat(os.fstat(folder.fd), os.stat(tmp_path / "mine"))
    assert (tmp_path / "mine" / "a.lock").exists()


@pytest.mark.parametrize("mode", [0o777, 0o750, 0o701], ids=oct)
def test_a_folder_others_can_enter_or_write_to_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(NotPrivate) as refused:
        private_folder(tmp_path, "shared", INSTEAD)
    message = str(refused.value)
    assert message.startswith(f"{folder} has mode {mode:04o}, not 0700:"), message
    assert "remove it (mmspec makes it again, mode 0700), or " + INSTEAD in message
    assert _mode(folder) == mode  # left as found: what others put there may still be there


def test_a_folder_of_another_user_is_refused(tmp_path):
    base, name, owner = _foreign_folder(tmp_path)
    with pytest.raises(NotPrivate) as refused:
        private_folder(base, name, INSTEAD)
    message = str(refused.value)
    assert f"is owned by uid {owner}, not by this user (uid {os.getuid()})" in message
    assert "have it removed (its owner or root can), or " + INSTEAD in message


def test_a_symbolic_link_to_a_folder_of_ones_own_is_refused(tmp_path):
    """Whoever made the link can point it elsewhere later: only a real folder is used."""
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotPrivate, match="is a symbolic link") as refused:
        private_folder(tmp_path, "link", INSTEAD)
    assert str(refused.value).startswith(f"{tmp_path / 'link'} is a symbolic link (to ")


def test_a_file_in_the_folders_place_is_refused(tmp_path):
    (tmp_path / "mine").write_text("")
    with pytest.raises(NotPrivate, match="mine is not a folder"):
        private_folder(tmp_path, "mine", INSTEAD)


def _runtime(tmp_path: Path, kind: str) -> Path:
    """An XDG_RUNTIME_DIR of the given kind under `tmp_path`."""
    folder = tmp_path / "run"
    if kind == "missing":
        return folder
    if kind == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "real")
        return folder
    folder.mkdir(mode=0o700)
    if kind == "mode 0755":
        folder.chmod(0o755)
    return folder


@pytest.mark.parametrize("kind", ["missing", "symlink", "mode 0755"])
def test_a_runtime_dir_that_is_not_the_users_own_is_ignored(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(_runtime(tmp_path, kind)))
    assert runtime_dir() is None


def test_the_runtime_dir_is_used_when_it_is_the_users_own(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(_runtime(tmp_path, "own")))
    assert runtime_dir() == tmp_path / "run"
    base, name, _ = _foreign_folder(tmp_path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / name))
    assert runtime_dir() is None
    monkeypatch.setenv("XDG_RUNTIME_DIR", "run")  # relative: not a runtime dir (the spec)
    monkeypatch.chdir(tmp_path)
    assert runtime_dir() is None
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runtime_dir() is None


def test_lock_files_are_0600_and_never_opened_through_a_link(tmp_path):
    (tmp_path / "mine").mkdir(mode=0o700)
    old = os.umask(0)
    try:
        with private_folder(tmp_path, "mine", INSTEAD) as folder, folder.lock_file("a.lock"):
            pass
    finally:
        os.umask(old)
    assert _mode(tmp_path / "mine" / "a.lock") == 0o600


def _bad_lock(folder: Path, kind: str) -> str:
    """Something other than a lock file of this user's at `folder/x.lock`; what the error says."""
    lock = folder / "x.lock"
    if kind == "symlink":
        lock.symlink_to(folder.parent / "elsewhere")
        return f"is a symbolic link (to {folder.parent / 'elsewhere'})"
    if kind == "folder":
        lock.mkdir()
        return "is a folder"
    if kind == "fifo":
        os.mkfifo(lock)
        return "is a FIFO"
    if kind == "socket":
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(str(lock))
        bound.close()
        return "is a socket"
    lock.touch()
    os.chown(lock, OTHER_UID, OTHER_UID)
    return f"is owned by uid {OTHER_UID}, not by this user (uid 0)"


@pytest.mark.parametrize("kind", ["symlink", "folder", "fifo", "socket", "foreign"])
def test_anything_but_a_lock_file_of_ones_own_is_refused_in_one_line(tmp_path, kind):
    """A FIFO does not block the open, a link is not followed (nothing is made at its target),
    and a file of another user's (only root can put one in the folder) is not used."""
    if kind == "foreign" and os.getuid() != 0:
        pytest.skip("giving a file to another user needs root (CI runs as root)")
    (tmp_path / "mine").mkdir(mode=0o700)
    said = _bad_lock(tmp_path / "mine", kind)
    with private_folder(tmp_path, "mine", INSTEAD) as folder:
        with pytest.raises(NotPrivate) as refused:
            folder.lock_file("x.lock")
    assert str(refused.value) == (
        f"{tmp_path / 'mine' / 'x.lock'} {said}: only a regular file of this user's is used as "
        "a lock; remove it (mmspec makes it again, mode 0600)"
    )
    assert not (tmp_path / "elsewhere").exists()


def test_what_happens_to_the_path_after_the_check_changes_nothing(tmp_path):
    """The folder is swapped for a link to another (someone else's) folder once it is open: its
    locks and sockets are still made in it, and reached through it."""
    (tmp_path / "theirs").mkdir(mode=0o777)
    with private_folder(tmp_path, "mine", INSTEAD) as folder:
        os.rename(tmp_path / "mine", tmp_path / "moved")
        (tmp_path / "mine").symlink_to(tmp_path / "theirs")
        with folder.lock_file("a.lock"):
            pass
        server = socket.socket(socket.AF_UNIX)
        server.bind(folder.address("a.sock"))
        server.listen(1)
        with server, socket.socket(socket.AF_UNIX) as client:
            client.connect(folder.address("a.sock"))
        folder.unlink("a.sock")
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["a.lock"]
    assert not list((tmp_path / "theirs").iterdir())


def test_a_socket_address_fits_whatever_the_folders_length(tmp_path):
    deep = tmp_path / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    with private_folder(deep, "mine", INSTEAD) as folder:
        address = folder.address("0123456789abcdef-255.sock")
        assert len(address.encode()) < 107
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(address)
    assert (deep / "mine" / "0123456789abcdef-255.sock").exists()


def _parent(tmp_path: Path, kind: str) -> Path:
    """A base folder (for `private_folder`) under a parent of the given kind."""
    parent = tmp_path / "parent"
    parent.mkdir()
    if kind == "world-writable":
        parent.chmod(0o777)
    elif kind == "sticky":
        parent.chmod(0o1777)
    elif kind == "group-writable":
        parent.chmod(0o770)
    elif kind == "foreign":
        os.chown(parent, OTHER_UID, OTHER_UID)
    (parent / "base").mkdir()
    return parent / "base"


@pytest.mark.parametrize("kind", ["world-writable", "foreign"])
def test_a_folder_under_one_another_user_can_rename_entries_in_is_refused(tmp_path, kind):
    """Another user could swap the folder (or the base holding it) for one of theirs between two
    jobs: nothing is made there, and the error says what to do."""
    if kind == "foreign" and os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root (CI runs as root)")
    base = _parent(tmp_path, kind)
    with pytest.raises(NotPrivate) as refused:
        private_folder(base, "mine", INSTEAD)
    problem = {
        "world-writable": "has mode 0777: every user can write to it, and it has no sticky bit",
        "foreign": f"is owned by uid {OTHER_UID}",
    }[kind]
    assert str(refused.value) == (
        f"{tmp_path / 'parent'} {problem}: another user could rename {base / 'mine'} and put a "
        "folder of theirs in its place; mmspec keeps its sockets and locks only under folders "
        f"that no other user can rename entries in; {INSTEAD}"
    )
    assert not (base / "mine").exists()


@pytest.mark.parametrize("kind", ["sticky", "group-writable"])
def test_a_folder_under_a_sticky_or_group_writable_parent_is_used(tmp_path, kind):
    """The sticky bit (as /tmp has) lets no other user rename this user's entries; a group's
    members are trusted with its group-writable folders."""
    base = _parent(tmp_path, kind)
    private_folder(base, "mine", INSTEAD).close()
    assert _mode(base / "mine") == 0o700


def test_links_on_the_way_are_followed_from_checked_folders(tmp_path):
    """A base spelt through links (`/tmp` -> `private/tmp`, `..`): reached; a link that lives in
    a folder every user can write to is refused with that folder."""
    (tmp_path / "real" / "base").mkdir(parents=True)
    (tmp_path / "link").symlink_to("real")  # relative
    (tmp_path / "abs").symlink_to(tmp_path / "link" / "base")  # absolute, through a link
    for spelt in ["link/base", "abs", "real/../link/./base", "abs/../base"]:
        with private_folder(tmp_path / spelt, "mine", INSTEAD) as folder:
            assert os.path.samestat(os.fstat(folder.fd), os.stat(tmp_path / "real/base/mine"))
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)
    (tmp_path / "open" / "link").symlink_to(tmp_path / "real" / "base")
    with pytest.raises(NotPrivate, match=f"^{tmp_path / 'open'} has mode 0777"):
        private_folder(tmp_path / "open" / "link", "mine", INSTEAD)
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(NotPrivate, match="too many symbolic links"):
        private_folder(tmp_path / "loop", "mine", INSTEAD)


def test_a_missing_base_is_a_one_line_error(tmp_path):
    with pytest.raises(NotPrivate) as refused:
        private_folder(tmp_path / "missing" / "deeper", "mine", INSTEAD)
    assert str(refused.value) == (
        f"{tmp_path / 'missing'} cannot be used for {tmp_path / 'missing/deeper/mine'} "
        f"(No such file or directory); {INSTEAD}"
    )


def test_a_handed_down_folder_is_checked_again(tmp_path):
    with private_folder(tmp_path, "mine", INSTEAD) as folder:
        assert adopt(os.dup(folder.fd), folder.path).path == folder.path
        os.chmod(tmp_path / "mine", 0o755)  # opened up since the check
        with pytest.raises(NotPrivate, match="mine has mode 0755, not 0700"):
            adopt(folder.fd, folder.path)
