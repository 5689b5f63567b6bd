"""Durable, atomic writes (`mmspec.storage.durable`): a file is there whole or not at all, whether
its writer finishes, fails midway or is killed midway, and a reader never sees half of one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mmspec.storage import durable


def _hidden(folder) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(".")]


def test_a_write_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "out.json"
    durable.write_text(path, "old")
    durable.write_text(path, "new")
    assert path.read_text() == "new"
    assert os.listdir(tmp_path / "sub") == ["out.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "out.bin"
    durable.write_bytes(path, b"old and whole")
    with pytest.raises(RuntimeError, match="disk full"):
        with durable.atomic_file(path) as sink:
            sink.write(b"half of the new")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old and whole"
    assert os.listdir(tmp_path) == ["out.bin"]


WRITE_HALF_THEN_WAIT = """
import sys, time
from mmspec.storage import durable
with durable.atomic_file(sys.argv[1]) as sink:
    sink.write(b"half of the new")
    sink.flush()
    time.sleep(3600)
"""


def test_a_writer_killed_midway_leaves_the_old_file(tmp_path):
    path = tmp_path / "out.bin"
    durable.write_bytes(path, b"old and whole")
    writer = subprocess.Popen([sys.executable, "-c", WRITE_HALF_THEN_WAIT, str(path)])
    deadline = time.monotonic() + 120
    while not _hidden(tmp_path) and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    (temp,) = _hidden(tmp_path)
    while (tmp_path / temp).stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    assert path.read_bytes() == b"old and whole"
    # what a killed writer leaves is hidden, named for what it was writing
    assert temp.startswith(".out.bin.") and temp.endswith(durable.TEMP_SUFFIX)


def test_a_reader_never_sees_half_a_file(tmp_path):
    path = tmp_path / "chunk.json"
    durable.write_text(path, json.dumps({"n": 0, "records": []}))
    done, seen, problems = threading.Event(), [], []

    def read():
        while not done.is_set():
            try:
                seen.append(json.loads(path.read_text())["n"])
            except (json.JSONDecodeError, KeyError) as err:
                problems.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(1, 200):
        durable.write_text(path, json.dumps({"n": n, "records": [{"x": "y" * 1000}] * n}))
    done.set()
    reader.join()
    assert not problems and seen == sorted(seen)
    assert os.listdir(tmp_path) == ["chunk.json"]


def test_a_finished_folder_replaces_the_old_one(tmp_path):
    old = tmp_path / "head"
    old.mkdir()
    (old / "stale.bin").write_bytes(b"old")
    new = tmp_path / "head.tmp"
    (new / "sub").mkdir(parents=True)
    (new / "model.bin").write_bytes(b"new")
    (new / "sub" / "config.json").write_text("{}")
    durable.replace_folder(new, old)
    assert sorted(p.name for p in old.rglob("*")) == ["config.json", "model.bin", "sub"]
    assert not new.exists()
