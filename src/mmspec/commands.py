"""The commands' declarations: a module of `mmspec.stages` (a workflow stage) or of
`mmspec.cli.tools` (a tool) declares, at its top level, `HELP`, `add_arguments` and `main`, and
a stage its flags (`GPU`, `WARM`, `READS_ALL_COMPONENTS`; the stages package says what each
means).

The command line, the code fingerprints and the GPU and warm-worker policies all read these
declarations; nothing lists the commands by hand. They are read from the modules' source, not
imported, so `mmspec --help` and Snakemake's parse do not import torch: only the command that
runs is imported.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "stages"  # the workflow's stages
STAGES = "mmspec.stages"
FLAGS = ("GPU", "WARM", "READS_ALL_COMPONENTS")


@dataclass(frozen=True)
class Stage:
    """A stage's declaration, as its module's source states it."""

    name: str
    help: str
    gpu: bool = False
    warm: bool = False
    reads_all_components: bool = False

    @property
    def module(self) -> str:
        return f"{STAGES}.{self.name}"


def _constants(tree: ast.Module) -> dict:
    """The module's top-level `NAME = <literal>` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return found


def read(path: Path) -> Stage | None:
    """The stage a module's source declares; None for a helper module (no add_arguments and
    main). A stage whose declaration is incomplete is an error naming its file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if not {"add_arguments", "main"} & functions:
        return None
    constants = _constants(tree)
    missing = [n for n in ("add_arguments", "main") if n not in functions]
    if "HELP" not in constants:
        missing.append("HELP")
    if missing:
        raise ValueError(
            f"{path}: a stage module declares HELP, add_arguments and main; missing: {missing}"
        )
    flags = {flag.lower(): constants.get(flag, False) for flag in FLAGS}
    if not all(isinstance(value, bool) for value in flags.values()):
        raise ValueError(f"{path}: {', '.join(FLAGS)} are True or False")
    return Stage(path.stem, constants["HELP"], **flags)


@functools.cache
def declared(folder: Path = FOLDER) -> dict[str, Stage]:
    """Every stage of the package (or of a copy of its folder), by name."""
    stages = (read(path) for path in sorted(folder.glob("*.py")) if path.stem != "__init__")
    return {stage.name: stage for stage in stages if stage is not None}


def stage(name: str) -> Stage:
    """The stage `name`; an error listing the known ones for another."""
    known = declared()
    if name not in known:
        raise ValueError(f"unknown stage {name!r}; known: {sorted(known)}")
    return known[name]
