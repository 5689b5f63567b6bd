"""The catalog of components: every view, weight policy, tree policy, acceptance rule and
drafter, by kind and name, filled from their own declarations (`decoding.component`).

Built-in components register when their modules are imported (`BUILT_IN`). A researcher's own
package adds components without a fork through the entry point group `mmspec.components`: each
entry point names a Component subclass, e.g. in its pyproject.toml

    [project.entry-points."mmspec.components"]
    my_rule = "my_package.rules:MyRule"

(method rows, presets of components, join the registry through `mmspec.methods`:
`methods.registry`; examples/plugin shows both).

Their names then work in configs, `mmspec cells`, validation, fingerprints (their code changes
rerun their cells), the report and `mmspec verify-lossless`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from importlib.metadata import entry_points
from pathlib import Path

from mmspec.decoding.component import KINDS, Component

GROUP = "mmspec.components"
# Where the built-in components are declared: these modules, and every module of these packages
# but the head networks (`*_net.py`, imported only when a head is built or loaded), so a new
# built-in rule or drafter is one new file in its package.
BUILT_IN_MODULES = ("mmspec.decoding.views", "mmspec.decoding.weights", "mmspec.decoding.trees")
BUILT_IN_PACKAGES = ("mmspec.decoding.acceptance", "mmspec.decoding.drafters")

_COMPONENTS: dict[str, dict[str, type[Component]]] = {kind: {} for kind in KINDS}
_PLUGINS: dict[str, str] = {}  # component "kind:name" -> the entry point that added it
_loaded = False


class CatalogError(ValueError):
    """A component that cannot join the catalog, or a name it does not hold."""


def register(component: type[Component]) -> type[Component]:
    """Add a component class (a class decorator). Two components of one kind may not share a
    name."""
    if component.kind not in _COMPONENTS:
        raise CatalogError(
            f"{component.__qualname__}: kind {component.kind!r} is not one of "
            f"{sorted(_COMPONENTS)} (subclass one of decoding.component's kinds)"
        )
    if not component.name:
        raise CatalogError(f"{component.__qualname__} declares no name")
    known = _COMPONENTS[component.kind].get(component.name)
    if known is not None and known is not component:
        raise CatalogError(
            f"{component.kind} {component.name!r} is declared twice: by {_where(known)} and by "
            f"{_where(component)}"
        )
    _COMPONENTS[component.kind][component.name] = component
    return component


def _where(component: type[Component]) -> str:
    return f"{component.__module__}.{component.__qualname__}"


def load() -> None:
    """Import the built-in components and the installed plugins' (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in built_in_modules():
        importlib.import_module(module)
    for entry in entry_points(group=GROUP):
        try:
            loaded = entry.load()
        except Exception as error:  # a broken plugin is named, never skipped silently
            raise CatalogError(
                f"the component plugin {entry.name!r} ({entry.value}, entry point group "
                f"{GROUP}) failed to load: {type(error).__name__}: {error}"
            ) from error
        if inspect.isclass(loaded) and issubclass(loaded, Component):
            register(loaded)
            _PLUGINS[f"{loaded.kind}:{loaded.name}"] = entry.value


def built_in_modules() -> list[str]:
    """The modules that declare the built-in components."""
    found = list(BUILT_IN_MODULES)
    for name in BUILT_IN_PACKAGES:
        package = importlib.import_module(name)
        found += [
            f"{name}.{module.name}"
            for module in pkgutil.iter_modules(package.__path__)
            if not module.name.endswith("_net")
        ]
    return found


def components(kind: str) -> dict[str, type[Component]]:
    """name -> component class, of one kind."""
    load()
    return dict(_COMPONENTS[kind])


def get(kind: str, name: str) -> type[Component]:
    """The component of `kind` named `name`; CatalogError listing the known names."""
    found = components(kind).get(name)
    if found is None:
        raise CatalogError(
            f"no {kind} named {name!r}; known: {sorted(_COMPONENTS[kind])} (a plugin package "
            f"adds components through the entry point group {GROUP}: is it installed?)"
        )
    return found


def source_files(component: type[Component]) -> list[Path]:
    """The file that defines a component and those of the modules of its own top-level package
    that it imports, transitively (a plugin's helper modules run in its cells too)."""
    top = component.__module__.split(".")[0]
    found: dict[str, Path] = {}
    todo = [component.__module__]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # `a.b.C` where a.b is a module: C is no module
            continue
        if spec is None or not spec.has_location or not str(spec.origin).endswith(".py"):
            continue
        found[name] = Path(spec.origin)
        package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
        todo += [m for m in _imported(found[name], package) if m.split(".")[0] == top]
    return sorted(found.values())


def _imported(path: Path, package: str) -> list[str]:
    """The modules a Python file imports (`from a import b` names both a and a.b, since b may be
    a module); relative imports resolved against `package`."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names


def plugin_files() -> list[Path]:
    """The source files of the installed plugins' components (the aggregate and report stages'
    code fingerprints; a cell's own holds those of its components, `components.plugin_code`)."""
    load()
    plugins = [c for kind in _COMPONENTS.values() for c in kind.values() if is_plugin(c)]
    return sorted({f for c in plugins for f in source_files(c)})


def is_plugin(component: type[Component]) -> bool:
    """Whether an installed plugin added the component (not mmspec)."""
    load()
    return f"{component.kind}:{component.name}" in _PLUGINS
