"""One row of the check's table: a cell, a benchmark comparison or a dtype run, and its verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

COLUMNS = ("cell", "status", "lossless", "tau", "speedup", "speedup / Eq. 1", "verify_cost")


@dataclass
class Row:
    """One line of the table; `why` (printed under the table) says what failed and where to look."""

    cell: str
    status: str = "ok"
    lossless: str = ""
    tau: float | None = None
    speedup: float | None = None
    eq1_ratio: float | None = None  # measured speedup / Eq. 1's estimate
    verify_cost: float | None = None
    why: str = ""

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def cells(self) -> list[str]:
        numbers = (self.tau, self.speedup, self.eq1_ratio, self.verify_cost)
        return [self.cell, self.status, self.lossless, *map(number, numbers)]


def number(value: float | None) -> str:
    """A table's number: two decimals, or "-" for none."""
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None where either is missing or b is 0."""
    if a is None or b is None or not b:
        return None
    return a / b
