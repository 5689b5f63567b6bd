"""Task metrics by name: the quality of one output against its reference."""

from __future__ import annotations

import re


def normalise(text: str) -> str:
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


def quality(metric: str, scenario: str, turn: int, output: str, reference: str) -> float | None:
    """`toy`: the toy world's exact object-level accuracy; `exact_match`; `none` -> None."""
    if metric == "toy":
        from mmspec.toy.quality import score_toy

        return score_toy(scenario, turn, output, reference)
    if metric == "exact_match":
        return float(normalise(output) == normalise(reference))
    if metric == "none":
        return None
    raise ValueError(f"unknown metric {metric!r}; known: toy, exact_match, none")
