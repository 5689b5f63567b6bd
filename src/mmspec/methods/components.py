"""The components a resolved method spec composes, and what they read and require.

Everything here is derived from the components' own declarations (`decoding.component`, filled
into `decoding.catalog`): the components of a spec being resolved and the keys they read (so a
cell holds only those, and a grid never makes two cells that decode the same thing), whether a
rule preserves the target's distribution, which drafters train heads or draft images.
"""

from __future__ import annotations

from collections.abc import Mapping

from mmspec.decoding import catalog
from mmspec.decoding.component import TRAINED_HEAD, Component, Param, values
from mmspec.decoding.drafters.model import VIEWS, WEIGHTS
from mmspec.decoding.views import parse_views

AR = "none"  # the drafter of autoregressive decoding: no drafter
IDENTITY_KEYS = ("method", "drafter", "temperature")
TEMPERATURE = Param(
    "temperature", (int, float), 0.0, "sampling temperature", low=0, hint="0 = greedy"
)
# Self-SD (LVSpec's and SpecVLM's setting): a pair's `draft: self` drafts with the target itself
# (config resolves it to the target's reference; the job loads the weights once).
SELF_DRAFT = "self"


def is_self_draft(pair: dict) -> bool:
    """Whether a (resolved) pair drafts with its own target."""
    return pair.get("draft") == pair["target"]


def parts(spec: Mapping) -> list[type[Component]]:
    """The component classes of a spec: drafter, its views (and an ensemble's weight policy),
    tree policy, acceptance rule (none for AR)."""
    spec = values(spec)
    if spec.drafter == AR:
        return []
    drafter = catalog.get("drafter", spec.drafter)
    found = [drafter]
    if VIEWS.key in (p.key for p in drafter.params):
        views = parse_views(spec.of(VIEWS))
        found += [catalog.get("view", v) for v in views]
        if len(views) > 1:
            found.append(catalog.get("weights", spec.of(WEIGHTS)))
    found += [catalog.get("tree", spec.tree), catalog.get("acceptance", spec.acceptance)]
    return found


def read_params(spec: Mapping) -> list[Param]:
    """The params the spec's components read (each key once), temperature included."""
    spec = values(spec)
    found = {TEMPERATURE.key: TEMPERATURE}
    for part in parts(spec):
        for param in part.reads(spec):
            found.setdefault(param.key, param)
    return list(found.values())


def read_keys(spec: Mapping) -> frozenset[str]:
    """The keys of a resolved spec that its components read (the identity keys included)."""
    keys = set(IDENTITY_KEYS) | {p.key for p in read_params(spec)}
    if values(spec).drafter != AR:
        keys |= {"tree", "acceptance"}
    return frozenset(keys)


def readers(key: str) -> str:
    """The components that read `key`, in words (for errors naming an unread key)."""
    found = []
    for kind in ("view", "weights", "tree", "acceptance", "drafter"):
        names = [n for n, c in catalog.components(kind).items() if key in _all_params(c)]
        if names:
            where = " (an ensemble of two or more views)" if kind == "weights" else ""
            found.append(f"{kind} {', '.join(map(repr, names))}{where}")
    if key == "weights":
        found.append("an ensemble of two or more views")
    return " or ".join(found) or "no component"


def _all_params(component: type[Component]) -> set[str]:
    return {p.key for p in component.params}


def is_lossless(acceptance: str | None, params: Mapping | None = None) -> bool:
    """Whether a spec with this acceptance rule (None: AR) and hyperparameters preserves the
    target's distribution: a lossy rule with no room to relax (LANTERN delta 0 or k 0, LVSpec
    lambda 0 without PST, random relaxation rho 0) is the lossless rule draw for draw
    (tests/test_lantern.py, tests/test_loose.py)."""
    if acceptance is None:
        return True
    return catalog.get("acceptance", acceptance).lossless_with(values(params or {}))


def loose_rules() -> frozenset[str]:
    return frozenset(n for n, r in catalog.components("acceptance").items() if r.loose)


def head_drafters() -> frozenset[str]:
    """The drafters over a trained head (stage train_drafter)."""
    return frozenset(
        n for n, d in catalog.components("drafter").items() if TRAINED_HEAD in d.requires
    )


def image_drafters() -> tuple[str, ...]:
    """The drafters that also draft image codes under guidance (`drafts_images`)."""
    return tuple(n for n, d in catalog.components("drafter").items() if d.drafts_images)


def image_head_drafters() -> tuple[str, ...]:
    """The trained-head drafters that also draft image codes under guidance."""
    return tuple(n for n in image_drafters() if TRAINED_HEAD in catalog.get("drafter", n).requires)
