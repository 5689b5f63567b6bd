"""The hypervolume a set of points dominates: how much of the objective space, from a reference
point, the frontier covers (every objective maximized; negate one that is minimized).

Exact, by slicing along the last objective (fine for the tens to hundreds of points and two to
four objectives of a search).
"""

from __future__ import annotations

from collections.abc import Sequence


def frontier(points: Sequence[Sequence[float]]) -> list[tuple[float, ...]]:
    """The points no other point dominates (at least as good everywhere, better somewhere)."""
    pts = sorted({tuple(map(float, p)) for p in points}, reverse=True)
    out: list[tuple[float, ...]] = []
    for p in pts:
        if not any(_dominates(q, p) for q in out):
            out.append(p)
    return out


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The volume dominated by `points` and bounded below by `reference` (points not beyond the
    reference in every objective add nothing)."""
    ref = tuple(map(float, reference))
    inside = [p for p in frontier(points) if all(x > r for x, r in zip(p, ref, strict=True))]
    return _volume(inside, ref)


def reference(points: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """A reference point just below the worst of `points` in each objective (1% of its range,
    or of its value where the range is 0), so every point adds its share."""
    ref = []
    for values in zip(*points, strict=True):
        span = max(values) - min(values)
        ref.append(min(values) - (0.01 * span if span > 0 else 0.01 * max(1.0, abs(min(values)))))
    return tuple(ref)


def _volume(points: list[tuple[float, ...]], ref: tuple[float, ...]) -> float:
    if not points:
        return 0.0
    if len(ref) == 1:
        return max(p[0] for p in points) - ref[0]
    if len(ref) == 2:
        total, best_y = 0.0, ref[1]
        for x, y in sorted(points, key=lambda p: -p[0]):  # x falling: y must rise to add area
            if y > best_y:
                total += (x - ref[0]) * (y - best_y)
                best_y = y
        return total
    # slices between consecutive values of the last objective: the points at or above a slice
    # cover, in the other objectives, the volume of their projection
    levels = sorted({p[-1] for p in points})
    total, below = 0.0, ref[-1]
    for level in levels:
        above = [p[:-1] for p in points if p[-1] >= level]
        total += _volume(frontier(above), ref[:-1]) * (level - below)
        below = level
    return total


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b
