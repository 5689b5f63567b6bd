"""A catalog: the declarations of one extension point by name (a method's components, dataset
sources, model sources, task metrics), each a class of the point's base class.

Built-in entries register when their modules are imported (`built_in_modules`, and every module
or sub-package of `built_in_packages`, so a new built-in is one new file); a researcher's own
package adds entries through the point's entry point group, each entry point naming a class,
held to the plugin API's version as it loads (`plugins`). What cannot join (not a subclass, no
name, a name declared twice, a plugin refused) is a `CatalogError` naming the class or the
plugin and its group; a name the catalog does not hold is one naming the close matches and the
known names.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from mmspec.plugins import entry_points as plugins


class CatalogError(ValueError):
    """An entry that cannot join its catalog, or a name a catalog does not hold."""


def _where(entry: type) -> str:
    return f"{entry.__module__}.{entry.__qualname__}"


@dataclass(eq=False)
class Catalog:
    """The entries of one extension point. An entry is a subclass of `base` named by its class
    attribute `name_attr`; with `section_attr` (a component's `kind`) names are unique within a
    section, which must be one of `sections`."""

    noun: str  # one entry, in words ("dataset source")
    base: type  # the class each entry subclasses
    base_home: str  # where that class is declared, for errors ("data.source")
    group: str  # the entry point group plugins add entries through
    built_in_modules: tuple[str, ...] = ()
    built_in_packages: tuple[str, ...] = ()
    name_attr: str = "name"
    section_attr: str | None = None
    sections: tuple[str, ...] = ()
    # a plugin's entry refused beyond the checks above: why, in words (None: accepted)
    refuse_plugin: Callable[[type], str | None] | None = None
    # an entry that clashes with one held, beyond its name: why, in words (None: no clash)
    clash: Callable[[type, type], str | None] | None = None
    # (section, name) -> entry class; and -> the entry point of the plugins that added theirs
    entries: dict[tuple[str | None, str], type] = field(default_factory=dict)
    plugins: dict[tuple[str | None, str], str] = field(default_factory=dict)
    loaded: bool = False
    ever: set[type] = field(default_factory=set)  # every class that joined, since the start

    def key(self, entry: type) -> tuple[str | None, str]:
        section = getattr(entry, self.section_attr) if self.section_attr else None
        return section, getattr(entry, self.name_attr)

    def register(self, entry: type) -> type:
        """Add an entry class (a class decorator)."""
        if not (inspect.isclass(entry) and issubclass(entry, self.base)):
            raise CatalogError(
                f"{entry!r} is not a {self.base.__name__} subclass ({self.base_home})"
            )
        section, name = self.key(entry)
        if self.section_attr and section not in self.sections:
            raise CatalogError(
                f"{entry.__qualname__}: {self.section_attr} {section!r} is not one of "
                f"{sorted(self.sections)} (subclass one of {self.base_home}'s kinds)"
            )
        if not name:
            raise CatalogError(f"{entry.__qualname__} declares no {self.name_attr}")
        known = self.entries.get((section, name))
        if known is not None and known is not entry:
            raise CatalogError(
                f"{section or self.noun} {name!r} is declared twice: by {_where(known)} and by "
                f"{_where(entry)}"
            )
        for other in self.entries.values():
            why = self.clash(entry, other) if self.clash and other is not entry else None
            if why:
                raise CatalogError(why)
        self.entries[(section, name)] = entry
        self.ever.add(entry)
        return entry

    def load(self) -> None:
        """Import the built-in entries and the installed plugins' (once)."""
        if self.loaded:
            return
        self.loaded = True
        for module in self.built_in_module_names():
            self._register_declared(importlib.import_module(module))
        for entry, loaded in plugins.load_group(self.group, self.noun, CatalogError):
            where = f"the {self.noun} plugin {entry.name!r} ({entry.value}, entry point group "
            where += f"{self.group})"
            if not (inspect.isclass(loaded) and issubclass(loaded, self.base)):
                raise CatalogError(f"{where} names no {self.base.__name__} subclass (mmspec.api's)")
            refused = self.refuse_plugin(loaded) if self.refuse_plugin else None
            if refused:
                raise CatalogError(f"{where} {refused}")
            try:
                self.register(loaded)
            except CatalogError as error:
                raise CatalogError(f"{where}: {error}") from None
            self.plugins[self.key(loaded)] = entry.value

    def _register_declared(self, module) -> None:
        """Register the entries `module` declares. Its first import registered them, but a
        module is imported once per process: a catalog emptied since (a test) finds them here."""
        for value in vars(module).values():
            own = inspect.isclass(value) and value.__module__ == module.__name__
            if own and value in self.ever:
                self.register(value)

    def built_in_module_names(self) -> list[str]:
        """The modules that declare the built-in entries."""
        found = list(self.built_in_modules)
        for name in self.built_in_packages:
            package = importlib.import_module(name)
            found += [f"{name}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
        return found

    def of_section(self, section: str | None = None) -> dict[str, type]:
        """name -> entry class (of one section), in the order they registered."""
        self.load()
        return {name: e for (s, name), e in self.entries.items() if s == section}

    def get(self, name: str, section: str | None = None) -> type:
        """The entry named `name` (in `section`); a CatalogError naming close matches and the
        known names, and the entry point group a plugin adds them through."""
        self.load()
        found = self.entries.get((section, name))
        if found is not None:
            return found
        held = self.of_section(section)
        close = difflib.get_close_matches(name, list(held), n=2)
        guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        what = f"no {section} named" if section else f"unknown {self.noun}"
        raise CatalogError(
            f"{what} {name!r}{guess}; known: {sorted(held)} (a plugin package adds "
            f"{self.noun}s through the entry point group {self.group}: is it installed?)"
        )

    def is_plugin(self, entry: type) -> bool:
        """Whether an installed plugin added the entry (not mmspec)."""
        self.load()
        key = self.key(entry)
        return key in self.plugins and self.entries.get(key) is entry
