"""The kinds of check a claim makes over measured values, each giving a verdict.

A value is a point estimate with its 95% interval where the cells table has one (the intervals
its metric declares: cell_metrics). Two values differ only when their intervals do not overlap: a
difference inside overlapping intervals is INCONCLUSIVE, never a verdict either way. A value
without an interval decides nothing: every check it enters is INCONCLUSIVE, unless the
value is `exact` (a count of the decoded tokens themselves, the same on every run of one config,
such as the draft's visual tokens; or a reading of the points alone, which the scorecard gives
beside each verdict).

- `compare`: a above b (or below, `higher: false`);
- `threshold`: a at or above a fixed value (or below);
- `rank`: a among the best `within` of itself and the others;
- `order`: values in the stated order, each above the next;
- `trend`: a value rises (or falls) along a hyperparameter;
- `dominates`: every baseline point has a claimed point as fast (x) with quality (y) as high,
  on both axes beyond the intervals;
- `near`: a within a relative tolerance of b.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOLDS, FAILS, INCONCLUSIVE, NOT_APPLICABLE = "holds", "fails", "inconclusive", "not applicable"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_APPLICABLE)
# two means of the same scores, summed in another order, differ by rounding only: a baseline
# point as high as a claimed one up to this (relative) is reached, not missed
TIE = 1e-9


@dataclass(frozen=True)
class Value:
    """A measured value: its point estimate and, where measured, its 95% interval (NaN if not)."""

    point: float
    low: float = math.nan
    high: float = math.nan
    name: str = ""  # what it is, in words: "M tau", "lvspec lambda 0.7 retention"
    exact: bool = False  # its point decides without an interval (see the module's docstring)

    @property
    def decided(self) -> bool:
        """Whether the value can decide a verdict: it has an interval, or is exact."""
        return self.exact or (math.isfinite(self.low) and math.isfinite(self.high))

    @property
    def lower(self) -> float:
        return self.low if math.isfinite(self.low) else self.point

    @property
    def upper(self) -> float:
        return self.high if math.isfinite(self.high) else self.point

    def text(self) -> str:
        interval = f" [{self.low:.3g}, {self.high:.3g}]" if math.isfinite(self.low) else ""
        where = f"{self.name} " if self.name else ""
        # a count in full: two counts that differ in their last digit must not print alike
        point = (
            f"{self.point:.0f}"
            if self.exact and float(self.point).is_integer()
            else (f"{self.point:.3g}")
        )
        return f"{where}{point}{interval}"


@dataclass(frozen=True)
class Outcome:
    verdict: str
    measured: str  # the numbers behind the verdict, in words
    # the verdict of the point estimates alone (intervals ignored): what a reading of the
    # numbers without their uncertainty would say, set by the scorecard
    by_points: str = ""


def _missing(*values: Value) -> str | None:
    bad = [v.name or "a value" for v in values if not math.isfinite(v.point)]
    return f"no measurement of {', '.join(bad)}" if bad else None


def _undecided(verdict: str, *values: Value) -> tuple[str, str]:
    """`verdict`, or INCONCLUSIVE with the reason when a value has no interval (and is not
    exact): a comparison without one is noise, whatever its points say."""
    bad = [v.name or "a value" for v in values if not v.decided]
    if not bad:
        return verdict, ""
    return INCONCLUSIVE, f" (no interval: {', '.join(bad)})"


def _above(a: Value, b: Value, tolerance: float) -> str:
    """HOLDS when a lies above b beyond both intervals (and `tolerance`, absolute), FAILS when
    below, else INCONCLUSIVE."""
    if a.lower > b.upper + tolerance:
        return HOLDS
    if a.upper < b.lower - tolerance:
        return FAILS
    return INCONCLUSIVE


def mean_of(values: list[Value]) -> Value:
    """The mean of several values, its interval the mean of their intervals' ends: the widest
    the mean's can be whatever their correlation (cells of one dataset share its samples), so
    a verdict against it never rests on an assumed independence."""
    n = len(values)
    ends = ("point", "low", "high")
    point, low, high = (sum(getattr(v, end) for v in values) / n for end in ends)
    names = " and ".join(v.name or "a value" for v in values)
    return Value(point, low, high, name=f"mean of {names}", exact=all(v.exact for v in values))


def compare(a: Value, b: Value, higher: bool = True, tolerance: float = 0.0) -> Outcome:
    """a above b (`higher`) or below it. `tolerance` (relative to b) widens the band a
    difference must leave before it counts, beyond the intervals (or exact points)."""
    missing = _missing(a, b)
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    band = abs(tolerance * b.point)
    verdict = _above(a, b, band) if higher else _above(b, a, band)
    verdict, why = _undecided(verdict, a, b)
    sign = ">" if higher else "<"
    margin = f" by {100 * tolerance:g}%" if tolerance else ""  # "is a above b by 50%?"
    return Outcome(verdict, f"{a.text()} {sign}? {b.text()}{margin}{why}")


def threshold(a: Value, value: float, higher: bool = True) -> Outcome:
    """a at or above `value` (`higher`), or at or below it: decided by a's interval."""
    missing = _missing(a)
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    if higher:
        verdict = HOLDS if a.lower >= value else FAILS if a.upper < value else INCONCLUSIVE
    else:
        verdict = HOLDS if a.upper <= value else FAILS if a.lower > value else INCONCLUSIVE
    verdict, why = _undecided(verdict, a)
    return Outcome(verdict, f"{a.text()} {'>=' if higher else '<='}? {value:g}{why}")


def rank(a: Value, others: list[Value], within: int, higher: bool = True) -> Outcome:
    """a among the best `within` of itself and `others` (`within` 1: the best; 2: best or
    second-best). HOLDS when at most `within` - 1 others could be above a (a lies above the
    rest beyond the intervals), FAILS when at least `within` others lie above a beyond them,
    else INCONCLUSIVE."""
    missing = _missing(a, *others)
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    above = [b for b in others if compare(b, a, higher).verdict == HOLDS]
    unsure = [b for b in others if compare(a, b, higher).verdict != HOLDS]
    verdict = FAILS if len(above) >= within else HOLDS if len(unsure) < within else INCONCLUSIVE
    verdict, why = _undecided(verdict, a, *others)
    ranked = sorted([a, *others], key=lambda v: v.point, reverse=higher)
    place = 1 + next(i for i, v in enumerate(ranked) if v is a)
    sign = " >= " if higher else " <= "  # the points, sorted
    return Outcome(
        verdict,
        f"{a.name or 'a'} ranks {place} of {len(ranked)} (best {within}?): "
        + sign.join(v.text() for v in ranked)
        + why,
    )


def order(values: list[Value], higher: bool = True, tolerance: float = 0.0) -> Outcome:
    """Each value above the next (`higher`): HOLDS when every neighbouring pair holds, FAILS
    when any pair is reversed beyond its intervals, else INCONCLUSIVE."""
    if len(values) < 2:
        return Outcome(NOT_APPLICABLE, "fewer than two of the ordered values were measured")
    missing = _missing(*values)
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    verdicts = [compare(a, b, higher, tolerance).verdict for a, b in _neighbours(values)]
    sign = " >? " if higher else " <? "
    return Outcome(all_of(verdicts), sign.join(v.text() for v in values))


def trend(values: list[tuple[float, Value]], rises: bool = True, tolerance: float = 0.0) -> Outcome:
    """The value rises (`rises`) or falls along a hyperparameter: `values` are (setting, value).
    HOLDS when the points move that way at every step and the last setting's value lies beyond
    the first's interval; FAILS when any step, or the whole range, goes the other way beyond the
    intervals; else INCONCLUSIVE."""
    values = sorted(values, key=lambda sv: sv[0])
    if len({s for s, _ in values}) < 2:
        return Outcome(NOT_APPLICABLE, "fewer than two settings were measured")
    missing = _missing(*(v for _, v in values))
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    steps = [compare(b, a, rises, tolerance).verdict for (_, a), (_, b) in _neighbours(values)]
    ends = compare(values[-1][1], values[0][1], rises, tolerance).verdict
    monotone = all(
        (b.point > a.point) if rises else (b.point < a.point)
        for (_, a), (_, b) in _neighbours(values)
    )
    if FAILS in steps or ends == FAILS:
        verdict = FAILS
    else:
        verdict = HOLDS if monotone and ends == HOLDS else INCONCLUSIVE
    return Outcome(verdict, ", ".join(f"{s:g}: {v.text()}" for s, v in values))


def dominates(claimed: list[tuple[Value, Value]], baselines: list[tuple[Value, Value]]) -> Outcome:
    """Every baseline point (x, y) has a claimed point at least as far on x with y at least as
    high (both higher-is-better), decided by the intervals on both axes (x is often speedup).
    A baseline point is reached when a claimed point's lower ends lie at or above its upper ends
    (two equal points without width reach each other); it is missed (FAILS the claim) when every
    claimed point's x or y lies below its interval entirely; else the claim is INCONCLUSIVE."""
    if not claimed or not baselines:
        return Outcome(NOT_APPLICABLE, "no claimed point" if not claimed else "no baseline point")
    missing = _missing(*(v for point in claimed + baselines for v in point))
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    verdicts, notes = [], []
    for bx, by in baselines:
        surely = [(x, y) for x, y in claimed if _at_least(x.lower, bx.upper)]
        if any(_at_least(y.lower, by.upper) for _, y in surely):
            verdicts.append(HOLDS)
            continue
        maybe = [(x, y) for x, y in claimed if _at_least(x.upper, bx.lower)]
        best = max(maybe, key=lambda xy: xy[1].point, default=None)
        missed = not any(_at_least(y.upper, by.lower) for _, y in maybe)
        verdicts.append(FAILS if missed else INCONCLUSIVE)
        against = (
            "no claimed point as far"
            if best is None
            else f"the best claimed point as far: {best[0].text()}, {best[1].text()}"
        )
        notes.append(f"{bx.text()}, {by.text()} ({against})")
    measured = f"{verdicts.count(HOLDS)} of {len(baselines)} baseline points dominated"
    verdict, why = _undecided(
        all_of(verdicts), *(v for point in claimed + baselines for v in point)
    )
    notes_text = "; not: " + "; ".join(notes) if notes else ""
    return Outcome(verdict, measured + notes_text + why)


def _at_least(a: float, b: float) -> bool:
    """a >= b, a rounding difference (TIE, relative) apart counting as equal."""
    return a >= b - TIE * max(1.0, abs(b))


def near(a: Value, b: Value, tolerance: float) -> Outcome:
    """a within `tolerance` (relative to b's point) of b: HOLDS when the farthest ends of their
    intervals are that close, FAILS when even the nearest ends are farther, else INCONCLUSIVE."""
    missing = _missing(a, b)
    if missing:
        return Outcome(NOT_APPLICABLE, missing)
    scale = abs(b.point)
    gap = abs(a.point - b.point) / scale if scale else math.inf
    widest = max(abs(a.upper - b.lower), abs(a.lower - b.upper)) / scale if scale else math.inf
    nearest = max(0.0, a.lower - b.upper, b.lower - a.upper) / scale if scale else math.inf
    verdict = HOLDS if widest <= tolerance else FAILS if nearest > tolerance else INCONCLUSIVE
    verdict, why = _undecided(verdict, a, b)
    return Outcome(
        verdict,
        f"{a.text()} vs {b.text()}: {100 * gap:.3g}% apart (<= {100 * tolerance:g}%?){why}",
    )


def _neighbours(items: list) -> list[tuple]:
    return list(zip(items[:-1], items[1:], strict=True))


def all_of(verdicts: list[str]) -> str:
    """HOLDS when all hold, FAILS when any fails, else INCONCLUSIVE."""
    if FAILS in verdicts:
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def overall(verdicts: list[str]) -> str:
    """One verdict over several sets (results folders, datasets, seeds): HOLDS when every
    applicable set holds, FAILS when every one fails, NOT_APPLICABLE when none applies, else
    INCONCLUSIVE (the sets disagree, or some are inconclusive)."""
    applicable = [v for v in verdicts if v != NOT_APPLICABLE]
    if not applicable:
        return NOT_APPLICABLE
    if all(v == HOLDS for v in applicable):
        return HOLDS
    if all(v == FAILS for v in applicable):
        return FAILS
    return INCONCLUSIVE
