"""Lossless check: a method's greedy output against the AR output, token for token."""

from __future__ import annotations


def first_divergence(output: list[int], reference: list[int]) -> int | None:
    """Index of the first differing token (a length mismatch counts); None when identical."""
    for i, (a, b) in enumerate(zip(output, reference, strict=False)):
        if a != b:
            return i
    if len(output) != len(reference):
        return min(len(output), len(reference))
    return None
