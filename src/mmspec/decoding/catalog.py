"""The catalog of components: every view, weight policy, tree policy, acceptance rule and
drafter, by kind and name, filled from their own declarations (`decoding.component`).

Built-in components register when their modules are imported (`BUILT_IN`). A researcher's own
package adds components without a fork through the entry point group `mmspec.components`: each
entry point names a Component subclass, e.g. in its pyproject.toml

    [project.entry-points."mmspec.components"]
    my_rule = "my_package.rules:MyRule"

(method rows, presets of components, join the registry through `mmspec.methods`:
`methods.registry`; examples/plugin shows both).

Their names then work in configs, `mmspec cells`, validation, fingerprints (a change to their
code or to any module it imports reruns their cells: `import_closure`), the report and
`mmspec verify-lossless`. A plugin is held to the plugin API's version as it loads (`plugins`):
one written for another version, or a class still defining a hook an earlier version read, is
refused before any job, naming what replaced it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from mmspec import plugins
from mmspec.decoding.component import KINDS, Component

GROUP = "mmspec.components"
# Where the built-in components are declared: these modules, and every module (or sub-package:
# a trained head's folder, whose network and loss load only when a head is built or trained) of
# these packages, so a new built-in rule or drafter is one new file or folder in its package.
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
    for entry, loaded in plugins.load_group(GROUP, "component", CatalogError):
        where = f"the component plugin {entry.name!r} ({entry.value}, entry point group {GROUP})"
        if not (inspect.isclass(loaded) and issubclass(loaded, Component)):
            raise CatalogError(f"{where} names no component class (a subclass of mmspec.api's)")
        # a hook an earlier plugin API read would be ignored: refused, naming its replacement
        leftovers = plugins.leftovers(loaded)
        if leftovers:
            raise CatalogError(f"{where} was written for an earlier plugin API: {leftovers}")
        try:
            register(loaded)
        except CatalogError as error:
            raise CatalogError(f"{where}: {error}") from None
        _PLUGINS[f"{loaded.kind}:{loaded.name}"] = entry.value


def built_in_modules() -> list[str]:
    """The modules that declare the built-in components."""
    found = list(BUILT_IN_MODULES)
    for name in BUILT_IN_PACKAGES:
        package = importlib.import_module(name)
        found += [f"{name}.{module.name}" for module in pkgutil.iter_modules(package.__path__)]
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


def is_plugin(component: type[Component]) -> bool:
    """Whether an installed plugin added the component (not mmspec)."""
    load()
    return f"{component.kind}:{component.name}" in _PLUGINS
