"""The code a module can run: its import closure, read from its import statements (nothing is
imported, so Snakemake's parse stays cheap and a broken plugin is not executed to be hashed).

Code fingerprints (`fingerprint`) and warm workers' keys (`worker`) are built on it: a cell
reruns, and a warm worker is replaced, whenever any source file its code reaches changes.

Which modules are followed (their source hashed, their own imports read):
- mmspec's own modules, and every module of a package that provides mmspec plugins (a
  distribution with an `mmspec.*` entry point), wherever it is installed;
- any module whose file lies outside the environment's installed packages (a researcher's
  local source on PYTHONPATH, an editable install);
- never the standard library, nor an installed third-party package (torch, transformers):
  those are recorded by name (`Closure.installed`); their versions key warm workers
  (`worker`) and are recorded in each job's output, but do not rerun finished cells.

Imports are read at any depth of a module (inside functions too), relative ones resolved, and
importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, which are followed. A module
imported by name at run time (`importlib.import_module(some_string)`) cannot be seen in its
source: mmspec declares its own such imports in `DYNAMIC_IMPORTS`; a plugin should import its
modules with import statements.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import re
import site
import sys
import sysconfig
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

PACKAGE = "mmspec"
PLUGIN_GROUP_PREFIX = "mmspec."  # mmspec.components, mmspec.methods, mmspec.metrics, ...

# Modules that mmspec imports by name at run time, and what they import that way (a module, or
# a package: all of its modules). tests/test_fingerprint.py checks that every
# `importlib.import_module` call of the package is listed here.
DYNAMIC_IMPORTS = {
    # the built-in components (catalog.BUILT_IN_MODULES, BUILT_IN_PACKAGES)
    "mmspec.decoding.catalog": (
        "mmspec.decoding.views",
        "mmspec.decoding.weights",
        "mmspec.decoding.trees",
        "mmspec.decoding.acceptance",
        "mmspec.decoding.drafters",
    ),
    # a head's network, named by its drafter as "module:class"
    "mmspec.decoding.drafters.trained": ("mmspec.decoding.drafters",),
    # the stage or tool whose command line runs (the stages' own closures do not include each
    # other)
    "mmspec.cli": ("mmspec.stages", "mmspec.cli.tools"),
    # a toy recipe (its typed form) and its trainer, named by its kind (toy_model.TRAINERS)
    "mmspec.stages.toy_model": (
        "mmspec.toy.recipe",
        "mmspec.toy.training",
        "mmspec.toy.imagegen",
        "mmspec.toy.image_nets",
    ),
    # a catalog imports the built-in modules its instance names: each instance's module
    # declares them below (decoding.catalog, scoring.metric_catalog, data.source, models.source)
    "mmspec.plugins.catalog": (),
    # the built-in task metrics (metric_catalog.BUILT_IN_MODULES, BUILT_IN_PACKAGES)
    "mmspec.scoring.metric_catalog": ("mmspec.toy.metric", "mmspec.scoring.metrics"),
    # the built-in dataset and model sources (their catalogs' BUILT_IN_MODULES)
    "mmspec.data.source": ("mmspec.data.hf_source", "mmspec.toy.dataset_source"),
    "mmspec.models.source": ("mmspec.models.pretrained", "mmspec.toy.model_source"),
    # the readers the built-in model sources name (ModelSource.readers), by what they read
    "mmspec.models.image_generation": ("mmspec.toy.generator",),
    "mmspec.scoring.image_metrics": ("mmspec.toy.features",),
    # the embedded judge's rubric, the one a dataset source names (DatasetSource.rubric)
    "mmspec.scoring.judge.server": ("mmspec.toy.judge_rubric",),
}
# importlib.import_module calls whose modules are not mmspec's (transformers' processors,
# torch as mmspec.decoding.lazy stands for it): recorded by version like any installed package
THIRD_PARTY_DYNAMIC = ("mmspec.decoding.lazy", "mmspec.models.processors")


@dataclass(frozen=True)
class Closure:
    """What a set of modules can run: the source files followed, and the top-level names of the
    installed packages reached (torch, transformers: not followed), each sorted."""

    modules: tuple[tuple[str, Path], ...]  # (dotted name, source file), by name
    installed: tuple[str, ...]

    @property
    def files(self) -> list[Path]:
        return [path for _, path in self.modules]

    def digest(self) -> str:
        """A hash of the modules' names and sources: equal exactly when the source that can run
        is the same, wherever it is installed."""
        digest = hashlib.sha256()
        for name, path in self.modules:
            digest.update(name.encode() + b"\0")
            digest.update(_read(path))
        return digest.hexdigest()[:16]


def closure(modules: list[str], search: list[Path] | None = None) -> Closure:
    """The import closure of `modules` (dotted names). `search`: folders to resolve the top-level
    packages of `modules` in before sys.path (a copy of a package, in tests)."""
    found: dict[str, Path] = {}
    installed: set[str] = set()
    todo = list(modules)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        path = _resolve(name, tuple(map(str, search or ())))
        if path is None:
            continue  # an attribute imported with `from a import b`, or not installed here
        if not _followed(top, path):
            installed.add(top)
            continue
        found[name] = path
        todo += _parents(name)
        if path.suffix == ".py":
            todo += _imports(name, path)
        for extra in DYNAMIC_IMPORTS.get(name, ()):
            todo += [extra, *_package_modules(extra, search)]
    return Closure(tuple(sorted(found.items())), tuple(sorted(installed)))


@functools.cache
def digest(modules: tuple[str, ...]) -> str:
    """`closure(modules).digest()`, once per set of modules in a process (a Snakemake parse asks
    for every cell; the process reads the files of one state of the code)."""
    return closure(list(modules)).digest()


def foreign_code(classes) -> str:
    """ "+" and a short hash of the modules defining those of `classes` that are not mmspec's own
    (a plugin's, a test's), with every module they import; "" when all are mmspec's (whose
    code the stages' fingerprints hold). Added to a job's code fingerprint, it reruns the jobs
    that use a plugin when its code changes."""
    modules = tuple(sorted({c.__module__ for c in classes} - _own(classes)))
    return "+" + digest(modules) if modules else ""


def _own(classes) -> set[str]:
    return {c.__module__ for c in classes if c.__module__.split(".")[0] == PACKAGE}


def plugin_entry_points() -> list:
    """Every entry point of an `mmspec.*` group (components, method rows, metrics, ...)."""
    found = {
        (e.group, e.name, e.value): e
        for dist in distributions()
        for e in dist.entry_points
        if e.group.startswith(PLUGIN_GROUP_PREFIX)
    }
    return [found[k] for k in sorted(found)]


def plugin_modules() -> list[str]:
    """The modules the installed plugins' entry points name."""
    return sorted({e.module for e in plugin_entry_points()})


def plugin_package_modules() -> list[str]:
    """Every module of the packages that provide plugins (mmspec's own left out): what a plugin
    may import by name as well as by statement (a trained head names its network's module)."""
    found = []
    for top in sorted(_plugin_tops() - {PACKAGE}):
        found += [top, *_package_modules(top, None)]
    return found


def plugin_stamp() -> list[str]:
    """The installed plugins as their entry points and distributions' versions (a plugin
    installed, removed or upgraded changes it)."""
    stamp = []
    for e in plugin_entry_points():
        dist = e.dist
        owner = f"{dist.name}=={dist.version}" if dist is not None else "?"
        stamp.append(f"{e.group}:{e.name}={e.value} ({owner})")
    return stamp


@functools.cache
def _plugin_tops() -> frozenset[str]:
    """The top-level packages of the distributions that provide mmspec plugins."""
    tops = {PACKAGE}
    for e in plugin_entry_points():
        tops.add(e.module.partition(".")[0])
        for file in (e.dist.files or []) if e.dist is not None else []:
            if file.suffix == ".py" and len(file.parts) > 1 and file.parts[0].isidentifier():
                tops.add(file.parts[0])  # another package of the plugin's distribution
    return frozenset(tops)


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """Where installed packages live: this environment's site-packages and standard library,
    the user's site-packages, and every site- or dist-packages folder on sys.path (a system
    Python's /usr/lib/python3/dist-packages, a cluster module's tree)."""
    paths = sysconfig.get_paths()
    roots = {paths["purelib"], paths["platlib"], paths["stdlib"], paths["platstdlib"]}
    roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    roots |= {p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")}
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


def is_library_source(path: str | Path) -> bool:
    """Whether a source file is an installed library's or the standard library's: inside the
    environment's installed packages and of no plugin's package (what is not is mmspec's, a
    plugin's or your own source)."""
    resolved = Path(path).resolve()
    for root in map(Path, _installed_roots()):
        if resolved.is_relative_to(root):
            parts = resolved.relative_to(root).parts
            top = parts[0].removesuffix(".py") if parts else ""
            return top not in _plugin_tops()
    return False


def _followed(top: str, path: Path) -> bool:
    if top in _plugin_tops():
        return True
    resolved = str(path.resolve())
    return not any(resolved.startswith(root + "/") for root in _installed_roots())


def _parents(name: str) -> list[str]:
    """The packages whose __init__ importing `name` runs."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _resolve(name: str, search: tuple[str, ...] = ()) -> Path | None:
    """The file of module `name` (a package's __init__), found as the import system would,
    without importing anything; None for a namespace package, a built-in or a name that is no
    module."""
    top, _, rest = name.partition(".")
    if search:
        spec = importlib.machinery.PathFinder.find_spec(top, list(search))
        if spec is None:
            spec = _find_top(top)
    else:
        spec = _find_top(top)
    for part in rest.split(".") if rest else []:
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(
            f"{spec.name}.{part}", list(spec.submodule_search_locations)
        )
    if spec is None or not spec.has_location or not spec.origin:
        return None
    return Path(spec.origin)


def _find_top(top: str):
    try:
        return importlib.util.find_spec(top)  # a top-level name: finders only, nothing runs
    except (ImportError, ValueError):
        return None


def _package_modules(name: str, search: list[Path] | None) -> list[str]:
    """Every module of package `name` (none when it is a module)."""
    path = _resolve(name, tuple(map(str, search or ())))
    if path is None or path.name != "__init__.py":
        return []
    return [
        f"{name}.{'.'.join(p.relative_to(path.parent).with_suffix('').parts)}".removesuffix(
            ".__init__"
        )
        for p in sorted(path.parent.rglob("*.py"))
        if p != path
    ]


# import statements at any indentation: `import a.b as c, d` and `from .a import (b, c)`
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]+)", re.M)
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)", re.M)


def _imports(name: str, path: Path) -> list[str]:
    """The modules a source file imports, at any depth (each `from a import b` as both `a` and
    `a.b`: b may be a module). Read as text, not parsed: a line that only looks like an import
    (in a docstring) adds a name that resolves to nothing or to one more file hashed, never one
    less."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    text = _read(path).decode("utf-8", "replace")
    found = []
    for match in _IMPORT.finditer(text):
        found += [_first_word(part) for part in match.group(1).split(",")]
    for match in _FROM.finditer(text):
        base, names = match.group(1), match.group(2).strip("()")
        level = len(base) - len(base.lstrip("."))
        base = base[level:]
        if level:
            parts = package.split(".")
            if level - 1 >= len(parts):
                continue  # beyond the top-level package: no module
            anchor = parts[: len(parts) - (level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        found.append(base)
        for line in names.splitlines():
            for part in line.split("#")[0].split(","):
                if (word := _first_word(part)) and word != "*":
                    found.append(f"{base}.{word}")
    return [f for f in found if f and all(p.isidentifier() for p in f.split("."))]


def _first_word(text: str) -> str:
    words = text.split()
    return words[0] if words else ""


def _read(path: Path) -> bytes:
    return path.read_bytes()


def forget() -> None:
    """Drop what was read once per process (the installed plugins, where packages are
    installed): a test or a long-lived process that changed them."""
    _plugin_tops.cache_clear()
    _installed_roots.cache_clear()
    digest.cache_clear()
