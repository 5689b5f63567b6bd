"""A resolved method spec, typed (torch-free): what `registry.resolve` returns and a cell holds.

A `MethodSpec` is made of its components' own specs (`Part`: a component and the values of the
parameters it declares and reads), and each component is built from its own part alone, with
what it takes beside its values (`Part.build`). Stages read its fields and write them as typed
columns (`columns`), so score, aggregate and the report never re-parse the JSON of the
hyperparameters. Its dict form (`to_dict`, `parse`) is for the edges only: a job's JSON, the
tables' `hparams` column, a cell's slug.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from mmspec.decoding import catalog
from mmspec.decoding.component import DRAFT_MODEL, Component, TargetFacts, Values, values
from mmspec.decoding.trees import GAMMA
from mmspec.methods import components
from mmspec.methods.components import AR, is_lossless, is_self_draft
from mmspec.plugins import import_closure


@dataclass(frozen=True)
class Part:
    """One component of a method: its kind and name, and the values of the parameters it reads
    in the method's setting (`Component.reads`)."""

    kind: str  # "drafter", "view", "weights", "tree" or "acceptance"
    name: str  # the component's name in the catalog
    values: Values  # the values of the params it reads (a mapping given is wrapped)

    def __post_init__(self):
        object.__setattr__(self, "values", values(self.values))

    @property
    def component(self) -> type[Component]:
        """The component class it names (from the catalog)."""
        return catalog.get(self.kind, self.name)

    def build(self, **context):
        """The component, built from this part's values and `context`, what it takes beside
        them (`Component.from_spec`; by kind in docs/architecture.md)."""
        return self.component.from_spec(self.values, **context)

    @classmethod
    def of(cls, component: type[Component], spec: Mapping) -> Part:
        """The part of `component` in a resolved spec (the values it reads there)."""
        spec = values(spec)
        own = {p.key: spec.of(p) for p in component.reads(spec) if p.key in spec}
        return cls(component.kind, component.name, Values(own))


@dataclass(frozen=True)
class MethodSpec:
    """A resolved method: its components by name, the values each of them reads (`parts`), and
    every resolved hyperparameter (`params`, what the components' declarations read)."""

    method: str  # the registry method
    drafter: str  # components.AR for autoregressive decoding
    views: str | None
    weights: str | None
    tree: str | None
    acceptance: str | None
    temperature: float
    params: dict  # every resolved hyperparameter, as `registry.resolve` resolved them
    parts: tuple[Part, ...] = ()  # drafter, views (and weights), tree, rule; none for AR

    @classmethod
    def parse(cls, spec: Mapping) -> MethodSpec:
        """The typed form of a resolved spec's dict (`to_dict`; not validated again)."""
        resolved = Values(dict(spec))
        drafted = resolved.drafter != AR
        return cls(
            method=resolved.method,
            drafter=resolved.drafter,
            views=resolved.views if drafted else None,
            weights=resolved.weights if drafted else None,
            tree=resolved.tree if drafted else None,
            acceptance=resolved.acceptance if drafted else None,
            temperature=resolved.temperature,
            params=dict(spec),
            parts=tuple(Part.of(c, resolved) for c in components.parts(resolved)),
        )

    @property
    def gamma(self) -> int | None:
        """The chain's length: its tree part's value (None for other trees and AR)."""
        tree = self.part("tree")
        return int(tree.values.of(GAMMA)) if tree is not None and tree.name == "chain" else None

    @property
    def values(self) -> Values:
        """Its resolved values as its components' hooks receive them."""
        return Values(self.params)

    def to_dict(self) -> dict:
        """Every resolved hyperparameter by key (a job's JSON, the `hparams` column)."""
        return dict(self.params)

    def decoding(self) -> str:
        """What it decodes, whichever registry method reached it: two specs with the same
        components reading the same values give the same text."""
        return json.dumps({k: v for k, v in self.params.items() if k != "method"}, sort_keys=True)

    @property
    def is_ar(self) -> bool:
        """Whether it decodes autoregressively (no drafter)."""
        return self.drafter == AR

    def part(self, kind: str) -> Part | None:
        """The part of `kind` (the first view of an ensemble); None where the method has none."""
        return next((p for p in self.parts if p.kind == kind), None)

    def parts_of(self, kind: str) -> list[Part]:
        return [p for p in self.parts if p.kind == kind]

    def build_drafter(self, **context):
        """The drafter, built from its part and `context` (`target`, `draft`, `head`,
        `temperature`), given the part it mixes its views with (`weights`) when it composes
        an ensemble of views."""
        weights = self.part("weights")
        composed = {} if weights is None else {"weights": weights}
        return self.part("drafter").build(**context, **composed)

    @property
    def requirements(self) -> frozenset[str]:
        """What its components require (`decoding.component`'s requirement names)."""
        return frozenset().union(*(p.component.requirements(self.values) for p in self.parts))

    def needs(self, requirement: str) -> bool:
        """Whether its components require `requirement` (e.g. component.DRAFT_MODEL)."""
        return requirement in self.requirements

    def head_training(self) -> dict:
        """The values that define its drafter's trained head (its folder; none for a drafter
        without one): the drafter's values of the keys it declares in `training`."""
        drafter = self.part("drafter")
        if drafter is None:
            return {}
        training = drafter.component.training
        return {k: v for k, v in drafter.values.items() if k in training}

    def check_target(self, target: TargetFacts) -> None:
        """Each component's own checks of the pair's target (`Component.check_target`): a
        ValueError where the target cannot serve the method."""
        for part in self.parts:
            part.component.check_target(self.values, target)

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

    def plugin_code(self) -> str:
        """A short hash of the code of its components that installed plugins add, with every
        module they import ("" when it has none): part of its cell's code fingerprint, so that
        editing a plugin or a helper module of it reruns the cells that use it, and only those."""
        plugins = [part.component for part in self.parts if catalog.is_plugin(part.component)]
        modules = tuple(sorted({m for p in plugins for m in (p.__module__, *p.code_modules())}))
        return "+" + import_closure.digest(modules) if modules else ""

    def loaded_models(self, pair: dict) -> list[tuple[str, str]]:
        """The models a generate job of it loads on `pair`: the target, and the draft if it
        drafts with it ((reference, dtype) each)."""
        models = [(pair["target"], pair["dtype"])]
        # Self-SD (draft: self) drafts with the target's own weights, loaded once
        if self.needs(DRAFT_MODEL) and not is_self_draft(pair):
            models.append((pair["draft"], pair["dtype"]))
        return models
