"""Slow, self-contained fixtures made in the background from the session's start.

A test module that defines `background(root) -> value` (its work in subprocesses: the thread
only waits on them, so it holds neither the GIL nor torch's global thread settings) has it
started when the session collects the module (conftest.py), in one lane: one such job at a time,
on what the foreground leaves of the machine (about a core of two, most of the run). Its fixture
calls `result`, which waits for it, or runs it now when the session did not start it (the
module run alone, say).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-fixtures")
_started: dict[str, Future] = {}


def start(name: str, work: Callable[[Path], object], root: Path) -> None:
    """Queue `work(root)` in the lane (once per name)."""
    if name not in _started:
        _started[name] = _lane.submit(work, root)


def result(name: str, work: Callable[[Path], object], root: Callable[[], Path]):
    """`work`'s value: waited for when the session started it, else computed now in `root()`."""
    if name not in _started:
        return work(root())
    return _started[name].result()
