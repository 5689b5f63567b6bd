"""Methods as data: a method is a named composition drafter x view x tree policy x acceptance rule.

A cell's method spec is the registry entry's defaults overridden by the config's hyperparameters,
so a new combination is a new entry (or a config override), never new decoding code. The rows
live in `methods.rows`, one module per paper; here they are gathered, joined by the rows
installed plugins add, and resolved into specs.
"""

from __future__ import annotations

import difflib

from mmspec.decoding import catalog
from mmspec.decoding.component import Values
from mmspec.methods.components import (
    AR,
    TEMPERATURE,
    parts,
    read_keys,
    read_params,
    readers,
)
from mmspec.methods.rows import baselines, dream, heads, lantern, lvspec, sage_specvlm, tabed

# What a row is, and the shape of TABED's tree row: public names of the registry too
from mmspec.methods.rows.row import DRAFTING as DRAFTING
from mmspec.methods.rows.row import HEAD as HEAD
from mmspec.methods.rows.row import Method
from mmspec.methods.rows.tabed import spine_tree as spine_tree
from mmspec.methods.spec import MethodSpec
from mmspec.plugins import entry_points as plugins

# The built-in rows (one module per paper or baseline family: `methods.rows`), in the order
# the method catalogue lists them
METHODS = {
    m.name: m
    for m in [
        baselines.AUTOREGRESSIVE,
        baselines.SD,
        *tabed.VIEW_ROWS,
        baselines.SPD,
        baselines.SD_CHAIN,
        baselines.SD_TREE,
        sage_specvlm.SPECVLM,
        sage_specvlm.SAGE,
        baselines.EAGLE2_TREE,
        tabed.TABED_TREE,
        sage_specvlm.SAGE_TREE,
        *lantern.ROWS,
        *lvspec.ROWS,
        *heads.ROWS,
        *dream.ROWS,
    ]
}


# Installed plugins add method rows (a `Method`, or a list of them) through this entry point
# group; their component classes join the catalog through `catalog.GROUP`.
METHOD_GROUP = "mmspec.methods"


def _plugin_rows() -> list[Method]:
    """The method rows installed plugins add (entry point group `mmspec.methods`)."""
    rows = []
    for _, loaded in plugins.load_group(METHOD_GROUP, "method", catalog.CatalogError):
        found = loaded if isinstance(loaded, list | tuple) else [loaded]
        rows += [row for row in found if isinstance(row, Method)]
    for row in rows:
        if row.name in METHODS:
            raise catalog.CatalogError(
                f"a plugin's method {row.name!r} has the name of a method mmspec defines"
            )
        METHODS[row.name] = row
    return rows


PLUGIN_METHODS = _plugin_rows()

# The keys that choose a component, and the kind each one names.
CHOOSERS = {"drafter": "drafter", "tree": "tree", "acceptance": "acceptance"}


def known_params() -> dict[str, object]:
    """key -> Param of every hyperparameter some component in the catalog reads (the first
    declaration of a key wins; components sharing a key declare it alike)."""
    found = {TEMPERATURE.key: TEMPERATURE}
    for kind in ("drafter", "view", "weights", "tree", "acceptance"):
        for component in catalog.components(kind).values():
            for param in component.params:
                found.setdefault(param.key, param)
    return found


def resolve(
    method_name: str, hparams: dict, temperature: float = 0.0, strict: bool = True
) -> MethodSpec:
    """The spec of `method_name` with `hparams` applied (`temperature` unless they set one):
    the row's components, every hyperparameter they read (their declared defaults where
    neither sets one), and nothing else (`components.read_keys`). Raises ValueError naming the
    key on an unknown key, a value outside its declared type or range, or a combination that
    cannot run. A key of `hparams` that no component of the result reads is an error, unless
    not `strict` (one point of a grid, where another point may read it: config checks the grid
    as a whole)."""
    if method_name not in METHODS:
        raise ValueError(
            f"unknown method {method_name!r}{close_matches(method_name, METHODS)}; known: "
            f"{sorted(METHODS)} (a package adds method "
            f"rows through the entry point group {METHOD_GROUP}: is it installed?)"
        )
    row = METHODS[method_name].defaults
    spec = {**row, **hparams, "method": method_name}
    spec.setdefault(TEMPERATURE.key, temperature)
    # the components first: a key of an unknown component is no hyperparameter of the others
    _check_choices(spec, row, method_name)
    # a component's defaults, then those of the parts it names (a drafter's views, weights)
    for _ in range(2):
        for param in read_params(spec):
            spec.setdefault(param.key, param.default)
    known = known_params()
    for key in hparams:
        if key not in known and key not in CHOOSERS:
            close = difflib.get_close_matches(key, [*known, *CHOOSERS], n=3)
            guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"method {method_name!r} has no hyperparameter {key!r}: it {composition(spec)}, "
                f"and no other component of the catalog reads {key!r}{guess} (the method "
                "catalogue, docs/reference/methods.md, lists every component's)"
            )
    read = read_keys(spec)
    unread = [key for key in hparams if key not in read]
    if strict and unread:
        raise ValueError(unread_key_error(unread[0], method_name, spec))
    # a `lantern_eagle` verifying with `sampling` is exact, and its cell carries no delta; a
    # single view has no ensemble weights: keys no component reads are not part of the cell
    spec = {key: value for key, value in spec.items() if key in read}
    resolved = Values(spec)
    for param in read_params(resolved):
        problem = param.problem(resolved.get(param.key))
        if problem is not None:
            raise ValueError(problem)
    for part in parts(resolved):
        part.check(resolved)
    if resolved.drafter != AR and resolved.acceptance == "greedy" and resolved.temperature > 0:
        raise ValueError(
            f"acceptance 'greedy' with temperature {resolved.temperature}: greedy acceptance "
            "decodes the target's argmax; to sample at temperature > 0 use acceptance 'sampling'"
        )
    return MethodSpec.parse(spec)


def _check_choices(spec: dict, row: dict, method_name: str) -> None:
    """The component names of a spec are in the catalog; AR stays AR."""
    drafter = spec["drafter"]
    if row["drafter"] == AR:
        if drafter != AR:
            raise ValueError(
                f"drafter={drafter!r} is not one of [{AR!r}] for method {method_name!r}: AR has "
                "no drafter; sweep a drafting method (sd, eagle, ...) to draft"
            )
        return
    for key, kind in CHOOSERS.items():
        names = sorted(catalog.components(kind))
        if spec.get(key) not in names:
            if key == "drafter" and spec.get(key) in (AR, None):
                raise ValueError(
                    f"drafter={spec.get(key)!r} is not one of {names} for method "
                    f"{method_name!r}: every drafting method has a drafter; to decode "
                    "autoregressively use `method: ar`, which has no views or gamma"
                )
            raise ValueError(
                f"unknown {kind}: {key}={spec.get(key)!r}"
                f"{close_matches(spec.get(key), names)} is not one of {names}. A "
                f"package adds components through the entry point group {catalog.GROUP}: is "
                "the one that provides it installed?"
            )


def close_matches(name, names, n: int = 3) -> str:
    """ "(did you mean ...?)" for the (at most `n`) names close to a misspelt `name`; "" when
    none is."""
    close = difflib.get_close_matches(str(name), list(names), n=n)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def unread_key_error(key: str, method_name: str, spec: dict) -> str:
    """Why `key` is refused on a method whose components do not read it."""
    for kind in CHOOSERS.values():
        part = catalog.get(kind, spec[kind]) if spec.get(kind) in catalog.components(kind) else None
        if part is not None and key in (p.key for p in part.params):
            # composed, and declaring it, yet not reading it here: its own `reads` leaves it out
            return (
                f"{key} is declared by {kind} {part.name!r}, which method {method_name!r} "
                f"composes, but its reads(spec) does not return it here, so no cell would hold "
                f"it; a component reads what its `reads` returns (by default its `params`)"
            )
    return (
        f"{key} is read only by {readers(key)}, and method {method_name!r} here "
        f"{composition(spec)}{_swap_hint(key)}"
    )


def _swap_hint(key: str) -> str:
    """How an entry comes to read `key`: the component that reads it swapped in (a drafter,
    tree or rule by its key, a view by `views`), when one component does."""
    found = [
        (kind, name)
        for kind in ("drafter", "tree", "acceptance", "view")
        for name, part in catalog.components(kind).items()
        if key in (p.key for p in part.params)
    ]
    if len(found) != 1:
        return ""
    kind, name = found[0]
    choice = "views" if kind == "view" else kind
    return f"; to use it, set `{choice}: {name}` in the entry (or use a method that composes it)"


def composition(spec: dict) -> str:
    """What a resolved spec composes, each component with the hyperparameters it reads."""
    if spec["drafter"] == AR:
        return "decodes autoregressively (no drafter) and reads temperature"
    described = []
    for part in parts(spec):
        keys = [p.key for p in part.params] if part.kind != "drafter" else _own_keys(part, spec)
        described.append(f"{part.kind} {part.name!r} ({', '.join(keys) or 'no hyperparameters'})")
    return "composes " + ", ".join(described) + " and reads temperature"


def _own_keys(drafter, spec: dict) -> list[str]:
    """A drafter's own keys (a model drafter also reads its views' and weight policy's)."""
    others = {p.key for part in parts(spec) if part is not drafter for p in part.params}
    return [p.key for p in drafter.reads(Values(spec)) if p.key not in others]


def label(entry: str, method: str) -> str:
    """Display name of a config entry: the paper's row name when it is a registry method."""
    registered = METHODS.get(entry)
    if registered is not None and registered.label and entry == method:
        return registered.label
    return entry
