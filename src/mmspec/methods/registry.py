"""Methods as data: a method is a named composition drafter x view x tree policy x acceptance rule.

A cell's method spec is the registry entry's defaults overridden by the config's hyperparameters,
so a new combination is a new entry (or a config override), never new decoding code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The component choices a spec may name, and the hyperparameters each component reads.
VIEWS = ("M", "T")
DRAFTERS = ("none", "model")
TREES = ("none", "chain")
ACCEPTANCE = ("none", "greedy", "sampling")
LOSSLESS_ACCEPTANCE = ("none", "greedy", "sampling")


@dataclass(frozen=True)
class Method:
    """A registry entry: its components and the default value of every hyperparameter."""

    name: str
    description: str
    defaults: dict = field(default_factory=dict)


METHODS = {
    m.name: m
    for m in [
        Method(
            "ar",
            "autoregressive decoding with the target alone (the baseline of every speedup)",
            {"drafter": "none", "tree": "none", "acceptance": "none"},
        ),
        Method(
            "sd",
            "speculative decoding: a draft model proposes a chain of gamma tokens from one view",
            {"drafter": "model", "view": "M", "tree": "chain", "gamma": 5, "acceptance": "greedy"},
        ),
    ]
}

# Allowed values of hyperparameters whose domain is a fixed set; others are checked by type.
CHOICES = {"drafter": DRAFTERS, "view": VIEWS, "tree": TREES, "acceptance": ACCEPTANCE}
TYPES = {"gamma": int, "temperature": (int, float)}
# Keys every method accepts on top of its defaults.
COMMON_KEYS = {"temperature"}


def resolve(method_name: str, hparams: dict) -> dict:
    """The full spec of `method_name` with `hparams` applied; raises ValueError on unknown keys."""
    if method_name not in METHODS:
        raise ValueError(f"unknown method {method_name!r}; known: {sorted(METHODS)}")
    spec = dict(METHODS[method_name].defaults)
    for key, value in hparams.items():
        if key not in spec and key not in COMMON_KEYS:
            allowed = sorted(set(spec) | COMMON_KEYS)
            raise ValueError(
                f"method {method_name!r} has no hyperparameter {key!r}; allowed: {allowed}"
            )
        if key in CHOICES and value not in CHOICES[key]:
            raise ValueError(f"{key}={value!r} is not one of {list(CHOICES[key])}")
        if key in TYPES and (isinstance(value, bool) or not isinstance(value, TYPES[key])):
            raise ValueError(f"{key}={value!r} should be of type {TYPES[key]}")
        spec[key] = value
    if spec.get("gamma") is not None and spec["gamma"] < 1:
        raise ValueError(f"gamma must be >= 1, got {spec['gamma']}")
    return spec


def is_lossless(spec: dict) -> bool:
    """Whether the spec's acceptance rule preserves the target's output distribution."""
    return spec.get("acceptance", "none") in LOSSLESS_ACCEPTANCE
