"""The scorecard: every claim checked on the cells of one or more results folders.

A claim is checked on each set of cells apart (by default one results folder's dataset, pair,
temperature and seed; `per` pools over the rest) where the cells its check names first are
present. Its verdict over all its sets is `checks.overall`'s: it holds where every set holds,
fails where every set fails, and is inconclusive where they disagree. A set whose other cells
are absent is "not applicable", and so is a claim with no set at all.
"""

from __future__ import annotations

import difflib
import math
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd

from mmspec.claims import checks
from mmspec.claims.checks import NOT_APPLICABLE, Outcome, Value
from mmspec.claims.claim import EXACT, STATS, Check, Claim, Selector, guess, with_hparams

COLUMNS = [
    "paper",
    "claim_id",
    "claim",
    "where",
    "paper_numbers",
    "section",
    "shown_by",
    "note",
    "harness",
    "run",
    "set",
    "verdict",
    "measured",
    "by_points",
]


Z95 = 1.959964  # the normal quantile of a central 95% interval


class Ambiguous(Exception):
    """A selector that should pick one cell of a set picks several (or none)."""


def value_of(row: pd.Series, stat: str, name: str = "", points: bool = False) -> Value:
    """The row's `stat` with its interval (none with `points`: the point estimate alone, which
    then decides as an exact value would)."""
    column, interval, _ = STATS[stat]
    point = row.get(column)
    low, high = (row.get(c) for c in interval) if interval and not points else (math.nan,) * 2
    as_float = [math.nan if v is None or pd.isna(v) else float(v) for v in (point, low, high)]
    return Value(*as_float, name=name, exact=points or stat in EXACT)


def _name(row: pd.Series, stat: str) -> str:
    return f"{row['method']} {stat}"


def _one(group: pd.DataFrame, selector: Selector) -> pd.Series:
    rows = group[selector.mask(group)]
    if len(rows) != 1:
        found = ", ".join(sorted(set(rows["method"] + " " + rows["hp"]))[:4])
        unknown = selector.unknown_names() if rows.empty else []
        raise Ambiguous(
            f"{'no cell' if rows.empty else f'{len(rows)} cells'} of {selector.text()}"
            + (f" ({found}): add keys that pick one" if len(rows) > 1 else "")
            + (f": {'; '.join(unknown)}" if unknown else "")
        )
    return rows.iloc[0]


def _higher(check: Check, stat: str) -> bool:
    """The check's direction: its `higher`, else the statistic's own (FID: lower is better)."""
    return bool(check.options.get("higher", STATS[stat][2]))


def _mean(
    group: pd.DataFrame, selector: Selector, stat: str, datasets: list[str], points: bool = False
) -> Value:
    """The mean of the selected cells' `stat` over `datasets`, with an interval over samples:
    each dataset's interval read as a normal one (half-width 1.96 standard errors), the
    datasets' errors independent. A dataset without an interval leaves the mean without one."""
    rows = group[selector.mask(group)]
    values = []
    for dataset in datasets:
        one = rows[rows["dataset"] == dataset]
        if len(one) != 1:
            raise Ambiguous(f"{len(one)} cells of {selector.text()} on {dataset}")
        values.append(value_of(one.iloc[0], stat, points=points))
    label = rows["method"].iloc[0] if len(rows) else selector.text()
    n = len(values)
    mean = sum(v.point for v in values) / n
    errors = [(v.high - v.low) / (2 * Z95) for v in values]
    half = Z95 * math.sqrt(sum(e * e for e in errors)) / n  # NaN where a dataset has none
    over = f"mean over {n} dataset{'s' if n > 1 else ''}"
    return Value(
        mean, mean - half, mean + half, name=f"{label} {stat} ({over})", exact=values[0].exact
    )


def _values(
    group: pd.DataFrame, selectors: list[Selector], stat: str, opt: dict, points: bool
) -> list[Value]:
    """Each selector's value: its one cell's, or with `mean_over: dataset` its mean over the
    datasets where every selector has a cell."""
    if opt.get("mean_over") == "dataset":
        everywhere = [set(group[s.mask(group)]["dataset"]) for s in selectors]
        datasets = sorted(set.intersection(*everywhere))
        if not datasets:
            raise Ambiguous("no dataset has every compared cell")
        return [_mean(group, s, stat, datasets, points) for s in selectors]
    rows = [_one(group, s) for s in selectors]
    return [value_of(r, stat, _name(r, stat), points) for r in rows]


def run_check(check: Check, group: pd.DataFrame) -> Outcome:
    """The check's outcome on one set of cells, with the verdict of the points alone."""
    try:
        outcome = _run(check, group)
        return replace(outcome, by_points=_run(check, group, points=True).verdict)
    except Ambiguous as e:
        return Outcome(NOT_APPLICABLE, str(e), NOT_APPLICABLE)


def _run(check: Check, group: pd.DataFrame, points: bool = False) -> Outcome:
    kind, stat, sel, opt = check.kind, check.stat, check.selectors, check.options

    def value(row, stat, name=""):
        return value_of(row, stat, name, points)

    tolerance = float(opt.get("tolerance", 0.0))
    if kind in ("compare", "rank"):
        others = sel["b"] if isinstance(sel["b"], list) else [sel["b"]]
        a, *bs = _values(group, [sel["a"], *others], stat, opt, points)
        if kind == "rank":
            return checks.rank(a, bs, int(opt["within"]), _higher(check, stat))
        if opt.get("against") == "mean":
            bs = [checks.mean_of(bs)]
        outcomes = [checks.compare(a, b, _higher(check, stat), tolerance) for b in bs]
        verdicts = [o.verdict for o in outcomes]
        if NOT_APPLICABLE in verdicts:
            return next(o for o in outcomes if o.verdict == NOT_APPLICABLE)
        return Outcome(checks.all_of(verdicts), "; ".join(o.measured for o in outcomes))
    if kind == "threshold":
        (a,) = _values(group, [sel["a"]], stat, opt, points)
        return checks.threshold(a, float(opt["value"]), _higher(check, stat))
    if kind == "order":  # over the ordered cells the set has (a sweep may have some only)
        rows = [_one(group, s) for s in sel["cells"] if s.mask(group).any()]
        values = [value(r, stat, _name(r, stat)) for r in rows]
        return checks.order(values, _higher(check, stat), tolerance)
    if kind == "trend":
        rows = group[sel["a"].mask(group)]
        along = opt["along"]
        settings = rows["_hp"].map(lambda h: h.get(along))
        if settings.isna().any():
            raise Ambiguous(f"a cell of {sel['a'].text()} has no {along}")
        if settings.duplicated().any():
            repeated = settings[settings.duplicated()].iloc[0]
            raise Ambiguous(f"several cells of {sel['a'].text()} at {along}={repeated}")
        values = [
            (float(s), value(r, stat, stat))
            for s, (_, r) in zip(settings, rows.iterrows(), strict=True)
        ]
        return checks.trend(values, bool(opt.get("rises", True)), tolerance)
    if kind == "dominates":
        x, y = opt.get("x", "tau"), opt.get("y", "retention")

        def xy(selector):
            rows = group[selector.mask(group)]
            return [
                (value(r, x, _name(r, x)), value(r, y, _name(r, y))) for _, r in rows.iterrows()
            ]

        return checks.dominates(xy(sel["a"]), xy(sel["b"]))
    if kind == "near":
        a, b = _one(group, sel["a"]), _one(group, sel["b"])
        return checks.near(
            value(a, stat, _name(a, stat)), value(b, stat, _name(b, stat)), tolerance
        )
    raise ValueError(f"unknown check kind {kind!r}")


def _first(check: Check) -> Selector:
    """The selector whose cells make a set one of the claim's."""
    first = check.selectors.get("a") or check.selectors["cells"]
    return first[0] if isinstance(first, list) else first


def _set_name(keys: tuple[str, ...], values) -> str:
    values = values if isinstance(values, tuple) else (values,)
    parts = []
    for key, v in zip(keys, values, strict=True):
        parts.append(
            f"T={v:g}" if key == "temperature" else f"seed {v}" if key == "seed" else str(v)
        )
    return " · ".join(parts)


def _scope(claim: Claim) -> dict[str, tuple]:
    """The cells table's columns a claim is scoped to, with their values (those it sets)."""
    scope = {
        "dataset": claim.datasets,
        "pair": claim.pairs,
        "temperature": claim.temperatures,
        "device": claim.devices,
    }
    return {column: values for column, values in scope.items() if values}


def on_devices(devices: pd.Series, names: tuple[str, ...]) -> pd.Series:
    """Which of the cells' devices (`cuda:NVIDIA A100-SXM4-80GB`, `cpu`) are of a named class:
    a name as a whole word, any case (H20 is not H200)."""
    pattern = r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b"
    return devices.fillna("").str.contains(pattern, case=False, regex=True)


def scoped(claim: Claim, cells: pd.DataFrame) -> pd.DataFrame:
    """The cells of the datasets, pairs, temperatures and devices the claim speaks of."""
    for column, values in _scope(claim).items():
        keep = (
            on_devices(cells[column], values) if column == "device" else cells[column].isin(values)
        )
        cells = cells[keep]
    return cells


def evaluate(claims: list[Claim], runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (claim, results folder, set) where the claim applies (COLUMNS); a claim with
    no set in any folder gets one not-applicable row."""
    prepared = {run: with_hparams(cells) for run, cells in runs.items()}
    rows = []
    for claim in claims:
        found = 0
        for run, cells in prepared.items():
            cells = scoped(claim, cells)
            for set_values, group in cells.groupby(list(claim.per), sort=True):
                if not _first(claim.check).mask(group).any():
                    continue  # a set of the claim holds the cells its check names first
                outcome = run_check(claim.check, group)
                rows.append(_row(claim, run, _set_name(claim.per, set_values), outcome))
                found += 1
        if not found:
            first = _first(claim.check)
            what = f"no cell of {first.text()}"
            for key, values in _scope(claim).items():
                what += f" on {key} {', '.join(map(str, values))}"
            unknown = first.unknown_names() + _absent(list(prepared.values()), claim, first)
            if unknown:
                what += f": {'; '.join(unknown)}"
            rows.append(_row(claim, "", "", Outcome(NOT_APPLICABLE, what)))
    return pd.DataFrame(rows, columns=COLUMNS)


def _absent(tables: list[pd.DataFrame], claim: Claim, selector: Selector) -> list[str]:
    """The names the claim's datasets and pairs, and its first selector's columns, give that no
    cell of any table has, each with the close ones there are: a misspelling reads as one,
    not as a sweep that lacks the cells. (A registry method is `Selector.unknown_names`'.)"""
    wanted = [("dataset", claim.datasets), ("pair", claim.pairs)]
    wanted += [
        (column, value if isinstance(value, list) else [value])
        for column, value in selector.columns.items()
        if column != "registry_method"
    ]
    found = []
    for column, values in wanted:
        present = sorted(
            {str(v) for t in tables if column in t for v in t[column].dropna().unique()}
        )
        for value in values:
            if isinstance(value, str) and value not in present:
                close = difflib.get_close_matches(value, present, n=2)
                found.append(f"no cell has {column} {value!r}" + guess(close))
    return found


def _row(claim: Claim, run: str, set_name: str, outcome: Outcome) -> dict:
    return {
        "paper": claim.paper,
        "claim_id": claim.id,
        "claim": claim.claim,
        "where": claim.where,
        "paper_numbers": claim.paper_numbers,
        "section": claim.section,
        "shown_by": claim.shown_by,
        "note": claim.note,
        "harness": claim.harness,
        "run": run,
        "set": set_name,
        "verdict": outcome.verdict,
        "measured": outcome.measured,
        "by_points": outcome.by_points or outcome.verdict,
    }


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: its overall verdict, the count of sets by verdict, and its rows."""
    out = []
    for _, rows in table.groupby(["paper", "claim_id"], sort=False):
        verdicts = rows["verdict"].tolist()
        counts = Counter(verdicts)
        first = rows.iloc[0]
        out.append(
            {
                **{c: first[c] for c in COLUMNS[:9]},
                "verdict": checks.overall(verdicts),
                "sets": sum(v != NOT_APPLICABLE for v in verdicts),
                **{f"n_{v.replace(' ', '_')}": counts.get(v, 0) for v in checks.VERDICTS},
                "n_holds_by_points": int((rows["by_points"] == checks.HOLDS).sum()),
                "rows": rows,
            }
        )
    return pd.DataFrame(out)


def counts(table: pd.DataFrame, harness: bool = False) -> dict[str, int]:
    """The papers' claims by overall verdict; with `harness`, the harness checks' instead (they
    never count among the papers' claims)."""
    rows = summary(table) if len(table) else pd.DataFrame({"verdict": [], "harness": []})
    found = Counter(rows[rows["harness"].astype(bool) == harness]["verdict"])
    return {v: found.get(v, 0) for v in checks.VERDICTS}


def read_runs(paths: list[str | Path]) -> dict[str, pd.DataFrame]:
    """Cells tables by name: a results folder (its summary/cells.parquet) or a cells file."""
    from mmspec.storage.tables import read_table
    from mmspec.sweep.cell_metrics import CELLS

    files, seen = {}, {}
    for path in map(Path, paths):
        cells = path / "summary" / "cells.parquet" if path.is_dir() else path
        if not cells.exists():
            raise FileNotFoundError(
                f"{path}: no cells table (a results folder holds summary/cells.parquet, written "
                "by the aggregate stage)"
            )
        if str(path) in files or cells.resolve() in seen:
            # its sets would count twice in every tally
            also = f" (as {seen[cells.resolve()]})" if cells.resolve() in seen else ""
            raise ValueError(f"{path}: given twice{also}")
        seen[cells.resolve()] = path
        files[str(path)] = cells
    return {name: read_table(cells, CELLS).to_pandas() for name, cells in files.items()}
