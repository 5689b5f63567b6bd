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

from mmspec.decoding.component import KINDS, Component
from mmspec.plugins import entry_points as plugins
from mmspec.plugins.catalog import Catalog
from mmspec.plugins.catalog import CatalogError as CatalogError  # what callers catch

GROUP = "mmspec.components"
# Where the built-in components are declared: these modules, and every module (or sub-package:
# a trained head's folder, whose network and loss load only when a head is built or trained) of
# these packages, so a new built-in rule or drafter is one new file or folder in its package.
BUILT_IN_MODULES = ("mmspec.decoding.views", "mmspec.decoding.weights", "mmspec.decoding.trees")
BUILT_IN_PACKAGES = ("mmspec.decoding.acceptance", "mmspec.decoding.drafters")


def _earlier_api(component: type[Component]) -> str | None:
    """A hook an earlier plugin API read would be ignored: refused, naming its replacement."""
    leftovers = plugins.leftovers(component)
    return f"was written for an earlier plugin API: {leftovers}" if leftovers else None


CATALOG = Catalog(
    noun="component",
    base=Component,
    base_home="decoding.component",
    group=GROUP,
    built_in_modules=BUILT_IN_MODULES,
    built_in_packages=BUILT_IN_PACKAGES,
    section_attr="kind",
    sections=KINDS,
    refuse_plugin=_earlier_api,
)
register = CATALOG.register
load = CATALOG.load
built_in_modules = CATALOG.built_in_module_names


def components(kind: str) -> dict[str, type[Component]]:
    """name -> component class, of one kind."""
    return CATALOG.of_section(kind)


def get(kind: str, name: str) -> type[Component]:
    """The component of `kind` named `name`; CatalogError naming the known names."""
    return CATALOG.get(name, kind)


def is_plugin(component: type[Component]) -> bool:
    """Whether an installed plugin added the component (not mmspec)."""
    return CATALOG.is_plugin(component)
