"""A method row: a named composition of components with the defaults it sets, and the component
choices rows start from."""

from __future__ import annotations

from dataclasses import dataclass, field

# A method row names its components; each component's declared defaults fill the rest.
DRAFTING = {"drafter": "model", "views": "M", "tree": "chain", "acceptance": "greedy"}
HEAD = {"acceptance": "greedy"}  # a head drafter names its drafter and tree


@dataclass(frozen=True)
class Method:
    """A registry entry: its components, the default of every hyperparameter, a display label."""

    name: str  # what a sweep's `methods:` entry names (`method:`)
    description: str  # what it runs, a phrase for the method catalogue
    # its components (`drafter`, `views`, `tree`, `acceptance`) and any values it sets
    defaults: dict = field(default_factory=dict)
    label: str = ""  # its name in the report and the paper pages


def drafting(name: str, label: str, description: str, **overrides) -> Method:
    """A row over a draft model (`DRAFTING`: a greedy chain from view M), with `overrides`."""
    return Method(name, description, {**DRAFTING, **overrides}, label)
