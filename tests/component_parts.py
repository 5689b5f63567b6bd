"""A component outside a method, built as a method builds its parts (`methods.spec.Part`): from
its declared defaults, overridden by the values a test gives."""

from __future__ import annotations

from mmspec.decoding import catalog
from mmspec.methods.spec import Part


def part(kind: str, name: str, **values) -> Part:
    """The part of component `name` of `kind` at its defaults but `values` (a key it does not
    declare is ignored when it is built); `.build(...)` it."""
    return Part(kind, name, {**catalog.get(kind, name).defaults(), **values})
