"""Plugins installed into a folder of their own, and mmspec run with that folder on PYTHONPATH.

`install` lays a package out as an installation does: its modules, and a `<name>.dist-info`
folder whose `entry_points.txt` names its entry points, which importlib.metadata finds on
sys.path exactly as it finds pip's (tests/test_plugin.py installs the example with pip itself).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from workflow_cli import ROOT


def install(site: Path, name: str, modules: dict[str, str], entry_points: dict) -> Path:
    """Write the modules (path under `site` -> source) and the distribution `name`'s metadata
    naming `entry_points` ({group: {entry name: "module:attr"}}); `site`."""
    for path, source in modules.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(textwrap.dedent(source).lstrip())
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    groups = [
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in named.items())
        for group, named in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(groups))
    return site


def env(site: Path | None) -> dict:
    """The environment with `site` (if any) as the only PYTHONPATH folder."""
    found = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        found["PYTHONPATH"] = str(site)
    return found


def run(cmd: list[str], site: Path | None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env(site))
