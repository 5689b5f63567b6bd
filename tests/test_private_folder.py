"""A folder of this user's own (mmspec.private_folder), where warm workers and GPU locks live: made
0700 when missing, used when it is a real folder of this user's with mode 0700, refused
otherwise with an error naming the folder, what is wrong and what to do."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mmspec.private_folder import NotPrivate, lock_file, private_folder, runtime_dir

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
        folder = private_folder(tmp_path, "mine", INSTEAD)
    finally:
        os.umask(old)
    assert folder == tmp_path / "mine"
    assert stat.S_ISDIR(os.lstat(folder).st_mode) and _mode(folder) == 0o700
    assert os.lstat(folder).st_uid == os.getuid()


def test_an_existing_folder_of_this_users_own_is_used_as_it_is(tmp_path):
    """What a job finds when another job made the folder first, a moment or a week earlier."""
    (tmp_path / "mine").mkdir(mode=0o700)
    (tmp_path / "mine" / "a.lock").touch()
    assert private_folder(tmp_path, "mine", INSTEAD) == tmp_path / "mine"
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
    old = os.umask(0)
    try:
        with lock_file(tmp_path / "a.lock"):
            pass
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.lock") == 0o600
    (tmp_path / "b.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        lock_file(tmp_path / "b.lock")
    assert not (tmp_path / "elsewhere").exists()
