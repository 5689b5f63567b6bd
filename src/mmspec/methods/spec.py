"""A resolved method spec, parsed once into a typed object (torch-free).

Stages read its fields and write them as typed columns (`columns`), so score, aggregate and the
report never re-parse the JSON of the hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmspec.methods.components import is_lossless


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
        )

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
