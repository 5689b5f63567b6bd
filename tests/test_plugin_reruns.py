"""A researcher's own method, edited and rerun: a plugin whose component's logic lives in a helper
module of its package. Editing the helper or the component's own file changes the fingerprint
of exactly the cells that use it, and a warm worker started before the edit never runs the job:
the rerun runs the new code (mmspec.plugins.import_closure, mmspec.workflow.worker._key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_worker import _argv, _mmspec, _worker_pid

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "mmspec-rerun-check"
version = "0.1.0"
dependencies = ["mmspec"]

[project.entry-points."mmspec.components"]
prefix_greedy = "rerun_check.rules:PrefixGreedy"

[tool.setuptools.packages.find]
where = ["src"]
"""
RULES = '''
"""Greedy acceptance whose matching lives in a helper module."""

from mmspec.decoding.acceptance.rule import Rule

from .matching import matched


def accept(proposal, logits, temperature, sampler):
    target = logits.argmax(-1).tolist()
    n = matched(proposal.tokens, target)
    return list(range(n)), target[n]


class PrefixGreedy(Rule):
    name = "prefix_greedy"
    lossless = True
    judge = staticmethod(accept)
'''
MATCHING = '''
def matched(drafted, target):
    """How many drafted tokens match the target's argmax, in order."""
    n = 0
    while n < len(drafted) and drafted[n] == target[n]:
        n += 1
    return n
'''
# the helper's behaviour changed: still lossless (it accepts nothing), so only the steps show it
MATCHING_NONE = """
def matched(drafted, target):
    return 0
"""


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    """The plugin's source and a folder it is installed into: (site, source folder of its
    installed modules, which the tests edit as a researcher edits an editable install)."""
    source = tmp_path_factory.mktemp("plugin")
    (source / "src" / "rerun_check").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "src" / "rerun_check" / "__init__.py").write_text("")
    (source / "src" / "rerun_check" / "rules.py").write_text(RULES)
    (source / "src" / "rerun_check" / "matching.py").write_text(MATCHING)
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(source)],
        check=True,
    )  # fmt: skip
    return site


def _spec_argv(tiny_cell, out: Path) -> list[str]:
    """A chain of 3 verified by the plugin's rule (the spec written out: the test process does
    not have the plugin installed), drafted by the target itself, so that drafts are accepted."""
    argv = _argv(tiny_cell, "sd_chain", out, max_new=12, gamma=3)
    params = json.loads(argv[argv.index("--params") + 1])
    params["cell"]["spec"]["acceptance"] = "prefix_greedy"
    params["pair"]["draft"] = params["pair"]["target"]
    argv[argv.index("--params") + 1] = json.dumps(params)
    argv[argv.index("--draft-visual") + 1] = argv[argv.index("--target-visual") + 1]
    return argv


def _accepted(path: Path) -> int:
    return sum(sum(steps) for steps in pq.read_table(path)["step_accepted"].to_pylist())


def _edit(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def test_a_warm_worker_never_runs_a_plugin_edited_since_it_started(plugin, tiny_cell, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(plugin),
        "MMSPEC_WORKER_DIR": str(tmp_path),
        "MMSPEC_WORKER_IDLE": "600",
    }
    helper = plugin / "rerun_check" / "matching.py"
    rules = plugin / "rerun_check" / "rules.py"

    def job(name: str) -> subprocess.CompletedProcess:
        return _mmspec(_spec_argv(tiny_cell, tmp_path / f"{name}.parquet"), env, tmp_path)

    first = job("first")
    assert first.returncode == 0, first.stderr[-2000:]
    assert _accepted(tmp_path / "first.parquet") > 0  # the chain is accepted in part
    again = job("again")  # nothing changed: the same warm worker
    assert _worker_pid(again.stderr) == _worker_pid(first.stderr)

    # 1. the helper module's behaviour changes: the rerun runs it, in a fresh worker
    _edit(helper, MATCHING_NONE)
    edited = job("helper_edited")
    assert edited.returncode == 0, edited.stderr[-2000:]
    assert _accepted(tmp_path / "helper_edited.parquet") == 0
    assert _worker_pid(edited.stderr) != _worker_pid(first.stderr)
    outputs = pq.read_table(tmp_path / "helper_edited.parquet")["output_ids"].to_pylist()
    assert outputs == pq.read_table(tmp_path / "first.parquet")["output_ids"].to_pylist()

    # 2. the component's own file: build raises; the rerun fails with the new error...
    refusing = "\n    def __init__(self, **params):\n        raise RuntimeError('{}')\n"
    _edit(rules, RULES + refusing.format("the edited rule refuses to build"))
    broken = job("rule_edited")
    assert broken.returncode != 0
    assert "the edited rule refuses to build" in broken.stderr
    # ...and once reverted, the next run runs the reverted code, not the failing one
    _edit(rules, RULES)
    _edit(helper, MATCHING)
    reverted = job("reverted")
    assert reverted.returncode == 0, reverted.stderr[-2000:]
    assert _accepted(tmp_path / "reverted.parquet") == _accepted(tmp_path / "first.parquet")
    for pid in {_worker_pid(r.stderr) for r in (first, edited, reverted)}:
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass


def test_editing_a_plugins_helper_module_changes_its_cells_fingerprint_only(plugin, tmp_path):
    code = textwrap.dedent(
        """
        from mmspec.methods.registry import resolve
        spec = resolve("sd_chain", {"gamma": 3, "acceptance": "prefix_greedy"})
        plain = resolve("sd_chain", {"gamma": 3})
        print(spec.plugin_code(), repr(plain.plugin_code()))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(plugin)}

    def codes() -> list[str]:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    helper = plugin / "rerun_check" / "matching.py"
    before, plain = codes()
    assert before.startswith("+") and plain == "''"  # a cell without the plugin has none
    _edit(helper, MATCHING_NONE)
    after, plain_after = codes()
    _edit(helper, MATCHING)
    assert after != before and plain_after == plain
    assert codes()[0] == before  # the same source, the same fingerprint


def test_a_plugin_heads_network_module_is_part_of_its_cells_code(tmp_path, monkeypatch):
    """A trained head names its network's class as "module:Class" (imported by name, so no
    import statement shows it): editing that module changes the cells' fingerprint all the same
    (`Component.code_modules`)."""
    from mmspec.decoding import catalog
    from mmspec.decoding.drafters.trained import HeadDrafter
    from mmspec.methods.spec import MethodSpec
    from mmspec.plugins import import_closure

    package = tmp_path / "headplug_of_tests"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text("class Net:\n    layers = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class PluginHead(HeadDrafter):
        name = "plugin_head_of_tests"
        network_class = "headplug_of_tests.nets:Net"

    PluginHead.__module__ = "headplug_of_tests"  # as the plugin's own module defines it
    catalog.load()
    key = ("drafter", PluginHead.name)
    monkeypatch.setitem(catalog.CATALOG.entries, key, PluginHead)
    monkeypatch.setitem(catalog.CATALOG.plugins, key, "headplug_of_tests:X")
    spec = MethodSpec.parse({"method": "x", "drafter": PluginHead.name, "tree": "chain",
        "gamma": 3, "acceptance": "greedy", "temperature": 0.0})  # fmt: skip
    assert "headplug_of_tests.nets" in PluginHead.code_modules()
    before = spec.plugin_code()
    import_closure.digest.cache_clear()  # (a Snakemake parse reads the files once)
    (package / "nets.py").write_text("class Net:\n    layers = 2\n")
    assert before.startswith("+") and spec.plugin_code() != before
