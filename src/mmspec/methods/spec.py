"""A resolved method spec, parsed once into a typed object (torch-free).

A `MethodSpec` is made of its components' own specs (`Part`: a component and the values of the
parameters it declares and reads), so the runner builds each component from its part alone.
Stages read its fields and write them as typed columns (`columns`), so score, aggregate and the
report never re-parse the JSON of the hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmspec.decoding import catalog
from mmspec.decoding.component import Component
from mmspec.methods import components
from mmspec.methods.components import is_lossless


@dataclass(frozen=True)
class Part:
    """One component of a method: its kind and name, and the values of the parameters it reads
    in the method's setting (`Component.reads`)."""

    kind: str  # "drafter", "view", "weights", "tree" or "acceptance"
    name: str
    values: dict

    @property
    def component(self) -> type[Component]:
        return catalog.get(self.kind, self.name)

    def build(self, **context):
        """The tree policy or acceptance rule of this part (`from_spec` over its own values;
        `context`: what the component takes beside them, e.g. a rule's codebook)."""
        return self.component.from_spec(self.values, **context)

    @classmethod
    def of(cls, component: type[Component], spec: dict) -> Part:
        values = {p.key: spec[p.key] for p in component.reads(spec) if p.key in spec}
        return cls(component.kind, component.name, values)


@dataclass(frozen=True)
class MethodSpec:
    method: str  # the registry method
    drafter: str  # "none" for AR
    views: str | None
    weights: str | None
    tree: str | None
    acceptance: str | None
    temperature: float
    gamma: int | None  # chain length (None for trees and AR)
    params: dict  # every resolved hyperparameter, as `registry.resolve` returned it
    parts: tuple[Part, ...] = ()  # drafter, views (and weights), tree, rule; none for AR

    @classmethod
    def parse(cls, spec: dict) -> MethodSpec:
        drafted = spec["drafter"] != "none"
        tree = spec.get("tree") if drafted else None
        return cls(
            method=spec["method"],
            drafter=spec["drafter"],
            views=spec.get("views") if drafted else None,
            weights=spec.get("weights") if drafted else None,
            tree=tree,
            acceptance=spec.get("acceptance") if drafted else None,
            temperature=float(spec["temperature"]),
            gamma=int(spec["gamma"]) if tree == "chain" else None,
            params=spec,
            parts=tuple(Part.of(c, spec) for c in components.parts(spec)),
        )

    def part(self, kind: str) -> Part | None:
        """The part of `kind` (the first view of an ensemble); None where the method has none."""
        return next((p for p in self.parts if p.kind == kind), None)

    def parts_of(self, kind: str) -> list[Part]:
        return [p for p in self.parts if p.kind == kind]

    @property
    def lossless(self) -> bool:
        """Whether the method preserves the target's output distribution (AR does)."""
        return is_lossless(self.acceptance, self.params)

    def columns(self) -> dict:
        """The typed columns every generate/score row carries (tables.METHOD_COLUMNS)."""
        return {
            "registry_method": self.method,
            "views": self.views,
            "weights": self.weights,
            "tree": self.tree,
            "gamma": self.gamma,
            "acceptance": self.acceptance,
            "lossless_rule": self.lossless,
            "temperature": self.temperature,
        }
