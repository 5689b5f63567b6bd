"""Installed plugins: what the entry points of one of mmspec's groups name (components, method
rows, task metrics), loaded; a plugin that fails to import is an error naming it, never skipped.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points


def load_group(group: str, noun: str, error: type[Exception]) -> list[tuple[EntryPoint, object]]:
    """(entry point, the object it names) of every installed entry point of `group`; `noun`
    names the plugins in the `error` raised for one that fails to load ("component")."""
    found = []
    for entry in entry_points(group=group):
        try:
            loaded = entry.load()
        except Exception as cause:  # a broken plugin is named, never skipped silently
            raise error(
                f"the {noun} plugin {entry.name!r} ({entry.value}, entry point group {group}) "
                f"failed to load: {type(cause).__name__}: {cause}"
            ) from cause
        found.append((entry, loaded))
    return found


def register_group(group: str, noun: str, register, error: type[Exception]) -> list[EntryPoint]:
    """Pass what every entry point of `group` names to `register` (a catalog's class decorator);
    an `error` it raises is re-raised naming the plugin. The entry points, in order."""
    entries = []
    for entry, loaded in load_group(group, noun, error):
        try:
            register(loaded)
        except error as cause:
            raise error(
                f"the {noun} plugin {entry.name!r} ({entry.value}, entry point group {group}): "
                f"{cause}"
            ) from None
        entries.append(entry)
    return entries
