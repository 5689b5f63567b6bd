"""The package's layering, read from its import statements (at any depth, relative ones
resolved; nothing is imported: tests/package_structure.py): no two modules import each other,
directly or around a circle; nothing below the command line, the workflow's stages and the toy
world imports them; the decoding engine imports nothing above it, and the datasets nothing of
the models.

The toy world joins the layers below as a plugin would: the dataset, model and metric catalogs
import its modules by name (`data.source`, `models.source`, `scoring.metric_catalog`), as do the
code that reads a folder a model source names a reader for and the embedded judge's rubric: a
registration, not an import statement.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from package_structure import circles, import_graph, part_graph

import mmspec

PACKAGE = Path(mmspec.__file__).resolve().parent

# the command line (its tools, warm workers' processes, the docs' generated pages), what runs it
# (`python -m mmspec`), and the GPU check and benchmarks
COMMANDS = ("cli", "__main__", "gpu_check", "bench")
# each top layer: its modules or packages, and the only ones that may import them
TOP_LAYERS = {
    "the command line": (COMMANDS, COMMANDS),
    # (their declarations are read from the source: `commands`)
    "the workflow's stages": (("stages",), (*COMMANDS, "stages")),
    "the toy world": (("toy",), (*COMMANDS, "toy")),
    # what the Snakefile's rules read: the Snakefile alone imports it
    "the workflow's DAG": (("dag",), ("dag",)),
}
# the decoding engine, and the only modules it imports
ENGINE = "decoding"
BELOW_ENGINE = ("decoding", "plugins", "data.media")
# parts that must never import another (importer, imported): datasets are read without models
NEVER = (("data", "models"),)


def _within(module: str, package: str, parts: tuple[str, ...]) -> bool:
    return any(module == f"{package}.{p}" or module.startswith(f"{package}.{p}.") for p in parts)


def violations(root: Path) -> list[str]:
    """Every import of the package at `root` that breaks the layering, as "importer -> imported:
    why"."""
    package = root.name
    found = []
    for importer, imported in sorted(import_graph(root).items()):
        for module in sorted(imported):
            for layer, (parts, allowed) in TOP_LAYERS.items():
                if _within(module, package, parts) and not _within(importer, package, allowed):
                    why = f"only {', '.join(allowed)} import {layer}"
                    found.append(f"{importer} -> {module}: {why}")
            for low, high in NEVER:
                if _within(importer, package, (low,)) and _within(module, package, (high,)):
                    found.append(f"{importer} -> {module}: {low} never imports {high}")
            engine = _within(importer, package, (ENGINE,))
            if engine and not _within(module, package, BELOW_ENGINE):
                found.append(
                    f"{importer} -> {module}: the engine imports only {', '.join(BELOW_ENGINE)}"
                )
    return found


def test_the_package_keeps_its_layers():
    assert violations(PACKAGE) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph(PACKAGE)) == []


def test_no_parts_import_each_other_in_a_circle():
    """The top-level packages and loose modules stand on floors: none imports one that imports
    it back, directly or around a circle."""
    assert circles(part_graph(import_graph(PACKAGE), PACKAGE.name)) == []


def test_a_circle_of_imports_is_found(tmp_path):
    files = {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.sub import c\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import a\n",
        "d.py": "from pkg import a\n",
    }
    root = _package(tmp_path / "pkg", files)
    assert circles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_the_check_sees_imports_at_any_depth_and_of_any_form():
    graph = import_graph(PACKAGE)
    assert "mmspec.toy.world" in graph["mmspec.toy.dataset_source"]  # from mmspec.toy import world
    assert "mmspec.sweep.cells" in graph["mmspec.planning.plan"]  # `from mmspec.sweep import cells`
    assert "mmspec.data.hf" in graph["mmspec.data.hf_source"]  # inside a method


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_package_that_breaks_the_layers_fails_the_check(tmp_path):
    files = {
        "__init__.py": "",
        "cli.py": "from pkg.stages import prepare\n",
        "stages/__init__.py": "",
        "stages/prepare.py": "from pkg.data import source\n",
        "toy/__init__.py": "",
        "toy/world.py": "from pkg.data import media\n",
        "data/__init__.py": "",
        "data/media.py": "",
        "data/source.py": "from pkg.data import media\n",
        "decoding/__init__.py": "",
        "decoding/loops.py": "from pkg.plugins import catalog\nfrom . import views\n",
        "decoding/views.py": "from pkg.data.media import IMAGE\n",
        "plugins/__init__.py": "",
        "plugins/catalog.py": "",
        "methods/__init__.py": "",
        "methods/runner.py": "from pkg.decoding import loops\n",
    }
    root = _package(tmp_path / "pkg", files)
    assert violations(root) == []  # the layers as they should be
    _package(
        root,
        {
            # a data module reading the toy world, inside a function
            "data/stand_in.py": "def rows():\n    from ..toy import world\n",
            # a model module running a stage
            "methods/verify.py": "import pkg.stages.prepare\n",
            # the engine reaching up to the methods
            "decoding/trees.py": "from pkg.methods.runner import run\n",
            "report.py": "from pkg import cli\n",
            # a dataset reading a model's module
            "data/hf.py": "from pkg.models.pretrained import is_local\n",
            "models/__init__.py": "",
            "models/pretrained.py": "",
        },
    )
    commands = "cli, __main__, gpu_check, bench"
    assert violations(root) == [
        "pkg.data.hf -> pkg.models.pretrained: data never imports models",
        f"pkg.data.stand_in -> pkg.toy.world: only {commands}, toy import the toy world",
        "pkg.decoding.trees -> pkg.methods.runner: the engine imports only decoding, plugins, "
        "data.media",
        f"pkg.methods.verify -> pkg.stages.prepare: only {commands}, stages import the workflow's "
        "stages",
        f"pkg.report -> pkg.cli: only {commands} import the command line",
    ]
