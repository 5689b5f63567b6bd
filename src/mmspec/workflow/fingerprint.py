"""Code fingerprints: a hash of the source each stage can run, for Snakemake `params:`.

Snakemake does not see edits to an installed package; putting this hash in a rule's params makes
a change to a stage's code rerun that stage (and what depends on its outputs), nothing else. The
code a stage runs is the import closure of its module (`import_closure`), so no list of files is
kept by hand: a new helper module is covered as soon as the stage imports it.

A cell's fingerprint adds the import closure of its plugin components (`MethodSpec.plugin_code`),
so editing a plugin, or any helper module it imports, reruns exactly the cells that use it. The
stages that read every component's declaration (aggregate, report) cover every plugin's code.
"""

from __future__ import annotations

from pathlib import Path

from mmspec import commands
from mmspec.plugins import import_closure

PACKAGE = Path(__file__).resolve().parents[1]


def stage_closure(stage: str, package: Path = PACKAGE) -> import_closure.Closure:
    """The code `stage` can run. `package`: a copy of mmspec to read instead (tests)."""
    declared = commands.stage(stage)
    modules = [declared.module]
    if declared.reads_all_components:
        modules += import_closure.plugin_modules()
    search = [package.parent] if package != PACKAGE else None
    return import_closure.closure(modules, search)


def fingerprint(stage: str, package: Path = PACKAGE) -> str:
    """A short hash of the source `stage` can run (see the module's docstring)."""
    return stage_closure(stage, package).digest()
