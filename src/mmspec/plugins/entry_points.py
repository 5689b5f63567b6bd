"""Installed plugins: what the entry points of one of mmspec's groups name (components, method
rows, task metrics, dataset and model sources), loaded and held to the plugin API's version.

The plugin API (what `mmspec.api` exports, and the hooks a plugin's classes implement) has a
version of its own, `API_VERSION`, an integer raised whenever a plugin written for the previous
one would need a change. A plugin declares the version it was written for, `mmspec_api = 2`:
a class attribute of what its entry point names, or a module attribute of that module or of a
package above it. One declaring another version is refused when it loads, before any job,
naming the version and CHANGELOG.md's migration section; one declaring none is loaded as this
API's, with a line on stderr saying so. What an earlier version had and a
later one removed is named with its replacement too, whatever the plugin declares: a module or
function it imports (`MOVED_MODULES`, `REMOVED_NAMES`), a hook or attribute a component class
still defines (`REMOVED_HOOKS`, checked by the component catalog). A plugin that fails to import
is an error naming it, never skipped.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

API_VERSION = 2  # the plugin API this mmspec loads (CHANGELOG.md: the versions)
ATTRIBUTE = "mmspec_api"  # what a plugin declares its API version in
CHANGELOG = "CHANGELOG.md"  # at mmspec's repository root; on the docs site, its Changelog page


def migration(version: int) -> str:
    """Where the changes a plugin of API `version - 1` needs for API `version` are described."""
    return f"{CHANGELOG}, section 'Migration to API {version}'"


@dataclass(frozen=True)
class Removed:
    """A name a plugin of an earlier API used, which API `version` removed."""

    what: str  # what it was, in words
    replacement: str  # what to use or do instead
    version: int  # the API that removed it

    def advice(self, name: str, see: bool = True) -> str:
        where = f" (see {migration(self.version)})" if see else ""
        return (
            f"`{name}` ({self.what}), gone since plugin API {self.version}: "
            f"{self.replacement}{where}"
        )


# Modules a plugin of API 1 imported that API 2 moved (what a plugin imports is now in mmspec.api).
MOVED_MODULES = {
    "mmspec.decoding.acceptance.rules": Removed(
        "the acceptance rules' module, with their base `Rule`",
        "import the base as `from mmspec.api import AcceptanceRule`",
        2,
    ),
    **{
        f"mmspec.decoding.drafters.{kind}_net": Removed(
            f"the {kind} head's network",
            f"it is `mmspec.decoding.drafters.{kind}.net`, a head kind's folder; a head kind of "
            "your own names its network (`network_class`, see `mmspec.api.HeadDrafter`)",
            2,
        )
        for kind in ("eagle", "dream", "medusa", "kangaroo")
    },
}
_BUILT_BY_THE_ENGINE = (
    "the engine builds every component from its own values (`from_spec`); a drafter over two "
    "or more views gets its weight policy's part as `weights` and builds it with "
    "`weights.build(vocab_size=...)`"
)
# Functions a plugin of API 1 imported that API 2 removed, by (module, name).
REMOVED_NAMES = {
    (module, name): Removed(
        f"it built a {what} from a method's whole spec", _BUILT_BY_THE_ENGINE, 2
    )
    for module, name, what in (
        ("mmspec.decoding.views", "make_view", "view"),
        ("mmspec.decoding.weights", "make_policy", "weight policy"),
        ("mmspec.decoding.trees", "make_tree_policy", "tree policy"),
        ("mmspec.decoding.acceptance", "make_rule", "rule"),
    )
}


@dataclass(frozen=True)
class RemovedHook(Removed):
    """A hook or attribute of a component class that an earlier API read and a later one does
    not: a class defining it is refused, since it would be ignored. `classmethod_only`: only its
    classmethod form is the removed hook (a view's `build` is an instance method of API 2)."""

    classmethod_only: bool = False


REMOVED_HOOKS = {
    "build": RemovedHook(
        "a component's `build(cls, spec, *, ...)` classmethod, given the method's whole spec",
        "define the classmethod `from_spec(spec, **context)`: `spec` holds only the "
        "values of the params the component reads; a drafter's context is `target` (the "
        "target's Decoder), `draft`, `head`, `temperature`, and `weights` over two or more "
        "views",
        2,
        classmethod_only=True,
    ),
    "exit_below": RemovedHook(
        "the drafter attribute a chain read to stop drafting below a top-1 probability",
        "return None from `expand` where drafting should stop (every tree policy stops "
        "there, keeping the nodes grown so far)",
        2,
    ),
    "training_keys": RemovedHook(
        "a head drafter's classmethod naming the keys of its trained head",
        "list those params in the class attribute `training`",
        2,
    ),
}


def leftovers(component: type) -> str | None:
    """What a plugin's class still defines of the hooks earlier APIs read (`REMOVED_HOOKS`), in
    words naming each one's replacement; None when nothing. A hook counts where any class of
    its hierarchy defines it, or where a plugin's class (not mmspec's) assigns it to an object
    (`self.exit_below = ...` in its code)."""
    found = [
        (name, hook)
        for name, hook in REMOVED_HOOKS.items()
        if _defines(component, name, hook.classmethod_only)
    ]
    if not found:
        return None
    advice = "; ".join(hook.advice(name, see=False) for name, hook in found)
    since = max(hook.version for _, hook in found)
    return f"{component.__qualname__} still defines {advice} (see {migration(since)})"


def _defines(component: type, name: str, classmethod_only: bool) -> bool:
    for klass in inspect.getmro(component):
        held = klass.__dict__.get(name)
        if held is not None and (isinstance(held, classmethod) or not classmethod_only):
            return True
        if not classmethod_only and _assigns(klass, name):
            return True
    return False


def _assigns(klass: type, name: str) -> bool:
    """Whether a plugin's class assigns attribute `name` of some object in its code."""
    if klass.__module__.split(".")[0] in ("mmspec", "builtins"):
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):  # no source at hand: nothing to read
        return False
    return any(
        isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Store)
        for node in ast.walk(tree)
    )


def declared_api(entry: EntryPoint, loaded: object) -> object:
    """The API version a plugin declares (`mmspec_api`): on what its entry point names, else
    in the entry point's module or a package above it; None where it declares none."""
    declared = getattr(loaded, ATTRIBUTE, None)
    parts = entry.module.split(".")
    for n in range(len(parts), 0, -1):
        if declared is not None:
            break
        declared = getattr(sys.modules.get(".".join(parts[:n])), ATTRIBUTE, None)
    return declared


def api_problem(declared: object) -> str | None:
    """Why a plugin declaring API version `declared` cannot load here, in words; None when it
    can (it declares this version, or none)."""
    if declared is None or (type(declared) is int and declared == API_VERSION):
        return None
    if type(declared) is not int:
        return (
            f"declares {ATTRIBUTE} = {declared!r}, which is no API version (an integer; this "
            f"mmspec's is {API_VERSION})"
        )
    if declared > API_VERSION:
        return (
            f"declares {ATTRIBUTE} = {declared}: it was written for plugin API {declared}, "
            f"newer than this mmspec's API {API_VERSION}; upgrade mmspec, or use a release of the "
            f"plugin written for API {API_VERSION} ({CHANGELOG} lists each version's changes)"
        )
    steps = " then ".join(migration(v) for v in range(max(declared, 1) + 1, API_VERSION + 1))
    return (
        f"declares {ATTRIBUTE} = {declared}: it was written for plugin API {declared}, and this "
        f"mmspec loads API {API_VERSION} only; port it as {steps} says, then declare "
        f"{ATTRIBUTE} = {API_VERSION}"
    )


def _import_advice(cause: BaseException) -> str:
    """What replaced the module or name a plugin failed to import, when an earlier API had it."""
    if isinstance(cause, ModuleNotFoundError) and cause.name in MOVED_MODULES:
        return "; " + MOVED_MODULES[cause.name].advice(cause.name)
    found = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(cause))
    if isinstance(cause, ImportError) and found:
        name, module = found.groups()
        removed = REMOVED_NAMES.get((module, name))
        if removed is not None:
            return "; " + removed.advice(f"{module}.{name}")
    return ""


_UNDECLARED_NAMED: set[str] = set()  # plugins already told that they declare no version


def note_undeclared(where: str) -> None:
    """One line on stderr, once per plugin and process, for a plugin declaring no API version:
    it is loaded as this API's, which one written for an earlier API may not be."""
    if where in _UNDECLARED_NAMED:
        return
    _UNDECLARED_NAMED.add(where)
    print(
        f"mmspec: {where} declares no {ATTRIBUTE}: loaded as plugin API {API_VERSION}; declare "
        f"{ATTRIBUTE} = {API_VERSION} in its package once it is written for it (one written for "
        f"an earlier API: {migration(API_VERSION)})",
        file=sys.stderr,
    )


def load_group(group: str, noun: str, error: type[Exception]) -> list[tuple[EntryPoint, object]]:
    """(entry point, the object it names) of every installed entry point of `group`; `noun`
    names the plugins in the `error` raised for one that fails to load ("component") or was
    written for another API version."""
    found = []
    for entry in entry_points(group=group):
        where = f"the {noun} plugin {entry.name!r} ({entry.value}, entry point group {group})"
        try:
            loaded = entry.load()
        except Exception as cause:  # a broken plugin is named, never skipped silently
            raise error(
                f"{where} failed to load: {type(cause).__name__}: {cause}{_import_advice(cause)}"
            ) from cause
        declared = declared_api(entry, loaded)
        problem = api_problem(declared)
        if problem is not None:
            raise error(f"{where} {problem}")
        if declared is None:
            note_undeclared(where)
        found.append((entry, loaded))
    return found
