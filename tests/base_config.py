"""The smallest valid sweep: one toy dataset, the toy pair (two one-layer toy models trained for
one step) and `ar`. Tests build their configs from it rather than copying it."""

from __future__ import annotations

import copy

_BASE = {
    "datasets": {"toy_caption": {"source": "toy", "samples": 4}},
    "pairs": {"toy": {"target": "toy:target", "draft": "toy:draft"}},
    "toy": {
        "models": {
            "target": {"hidden": 32, "layers": 1, "steps": 1},
            "draft": {"hidden": 16, "layers": 1, "steps": 1},
        }
    },
    "methods": {"ar": {}},
}


def base_config(**sections) -> dict:
    """A fresh copy of the base sweep, with the given top-level sections replaced."""
    return copy.deepcopy({**_BASE, **sections})
