"""The cells table as the report reads it: which cells are AR or greedy, their names and order.

A cell is one (dataset, pair, method, hp, seed): one row of results/summary/cells.parquet.
"""

from __future__ import annotations

import functools
import json
import re

import pandas as pd

from mmspec.report.formatting import is_missing

# Method names of the plain autoregressive baseline (tau = 1 by construction).
AR_METHODS = {"ar"}
# Dataset groups whose average columns come first, in this order; any other group follows by name.
GROUP_ORDER = ["benchmark", "ood"]
# The columns that identify a cell, in the cells and blocks tables alike.
CELL_KEY = ["dataset", "pair", "method", "hp", "seed"]


# ---- kinds of cells --------------------------------------------------------------------------


def is_ar(method: object) -> bool:
    """Whether a method name denotes the autoregressive baseline."""
    return isinstance(method, str) and method.lower() in AR_METHODS


# The columns that can name a cell AR: its entry, the registry method it runs (as
# `ar_t1: {method: ar}` does) and its label.
AR_NAMING = ("method", "registry_method", "label")


def is_ar_row(row: pd.Series | dict) -> bool:
    """Whether a cell is the autoregressive baseline (by any of its AR_NAMING columns)."""
    return any(is_ar(row.get(key)) for key in AR_NAMING)


def without_ar(cells: pd.DataFrame) -> pd.DataFrame:
    """The speculative cells: all but the autoregressive baseline."""
    if cells.empty:
        return cells
    ar = pd.Series(False, index=cells.index)
    for key in AR_NAMING:
        if key in cells:
            ar |= cells[key].map(is_ar)
    return cells[~ar]


def is_greedy(row: pd.Series | dict) -> bool:
    """Whether a cell decodes greedily, so it must reproduce the AR output exactly."""
    return row.get("acceptance") == "greedy" or row.get("temperature") == 0


def is_lossy_rule(row: pd.Series | dict) -> bool:
    """Whether a cell's acceptance rule gives up the target distribution (`lossless_rule` false),
    so that its output may differ from AR's by design. Unknown counts as lossless."""
    rule = row.get("lossless_rule")
    return not is_missing(rule) and not bool(rule)


def lossless_bug(row: pd.Series | dict) -> bool:
    """A greedy cell of a lossless rule with a real divergence from AR (beyond a rounding
    near-tie; `scoring.lossless`): always an engine bug. A table without the counts (older)
    reads any difference as one."""
    if not is_greedy(row) or is_lossy_rule(row):
        return False
    real = row.get("real_divergences")
    if not is_missing(real):
        return float(real) > 0
    rate = row.get("lossless_rate")
    return not is_missing(rate) and float(rate) < 1.0


def view_tokens(views: object) -> list[str]:
    """The views of a `views` string, one per capital letter with its parameters ("U0.5")."""
    return re.findall(r"[A-Z][^A-Z]*", views) if isinstance(views, str) else []


# ---- names -----------------------------------------------------------------------------------


def display_name(row: pd.Series | dict) -> str:
    """The label of a cell, plus its views when the label does not already spell them.

    Paper labels do ("TABED^MT", "M"); a config method name does not, and one config entry may
    expand over several views, whose rows must stay apart.
    """
    label = row.get("label")
    name = str(label) if not is_missing(label) and label != "" else str(row.get("method"))
    views = row.get("views")
    if isinstance(views, str) and views and views not in name:
        name = f"{name} · {views}"
    return name


def with_labels(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with a label on every row (the method name where none) and a `_name` column."""
    cells = cells.copy()
    if "label" not in cells:
        cells["label"] = None
    cells["label"] = cells["label"].where(cells["label"].notna(), cells["method"])
    named = cells[[c for c in ("label", "method", "views") if c in cells]].to_dict("records")
    cells["_name"] = [display_name(row) for row in named]
    return cells


def hp_labels(
    cells: pd.DataFrame, name: str = "_name", ignore: tuple[str, ...] = ()
) -> dict[tuple[str, str], str]:
    """(display name, hp) -> what tells that cell's hyperparameters from the other cells of its
    name in `cells`: "key=value, ..." of the keys whose values differ among them, but those in
    `ignore` (a hp slug can end in a hash that hides them), or the hp slug where the hparams
    are not recorded."""
    hp = cells["hp"].fillna("").astype(str)
    if "hparams" not in cells:
        return dict(zip(zip(cells[name], hp, strict=True), hp, strict=True))
    parsed = [json.loads(h) if isinstance(h, str) and h else {} for h in cells["hparams"]]
    by_name: dict[str, dict[str, dict]] = {}
    for label, slug, params in zip(cells[name], hp, parsed, strict=True):
        by_name.setdefault(label, {})[slug] = params
    out = {}
    for label, of_name in by_name.items():
        keys = sorted(set().union(*of_name.values()))
        seen = {k: {json.dumps(p.get(k), sort_keys=True) for p in of_name.values()} for k in keys}
        varying = [k for k in keys if len(seen[k]) > 1 and k not in ignore]
        for slug, params in of_name.items():
            text = ", ".join(f"{k}={json.dumps(params.get(k))}" for k in varying)
            out[(label, slug)] = text.replace('"', "") or slug
    return out


def labelled(cells: pd.DataFrame) -> pd.DataFrame:
    """`cells` if they already went through `with_labels`, else `with_labels(cells)`."""
    return cells if "_name" in cells else with_labels(cells)


def key_of(values: tuple) -> tuple:
    """A CELL_KEY tuple in a form that compares equal across tables: strings, the seed an int."""
    *names, seed = values
    return (*(str(v) for v in names), None if is_missing(seed) else int(seed))


def cell_key(row: pd.Series) -> tuple:
    """The identity of a cell (CELL_KEY), as `key_of` normalises it."""
    return key_of(tuple(row[c] for c in CELL_KEY))


# ---- order -----------------------------------------------------------------------------------


def missing_first(value: object) -> tuple:
    """A sort key that puts missing values first and compares the others as they are."""
    return (0, 0) if is_missing(value) else (1, value)


@functools.cache
def _catalog_order(kind: str) -> dict[str, int]:
    """Name -> rank of the catalog's components of `kind`, in the catalog's order (view letters
    M, T, C, P, U, S; weight policies static first): rows are ordered by it wherever methods are
    listed, a plugin's component after the built-in ones."""
    from mmspec.decoding import catalog

    return {name: i for i, name in enumerate(catalog.components(kind))}


# The columns `cell_rank` reads.
RANK_COLUMNS = ["views", "weights", "method", "label", "gamma", "hp", "seed"]


def cell_rank(row: pd.Series | dict) -> tuple:
    """Sort key of a cell: AR, then single views, ensembles, drafters without views (trained heads);
    within each, by views (canonical letter order), weight policy, method, gamma, hp and seed."""
    tokens = view_tokens(row.get("views"))
    kind = 0 if is_ar_row(row) else 1 if len(tokens) == 1 else 2 if tokens else 3
    views, policies = _catalog_order("view"), _catalog_order("weights")
    view_key = tuple((views.get(t[0], len(views)), t) for t in tokens)
    policy = row.get("weights")
    policy = "" if is_missing(policy) else str(policy)
    policy_key = (policies.get(policy, len(policies)), policy)
    return (
        kind,
        len(tokens),
        view_key,
        policy_key,
        str(row.get("method")),
        missing_first(row.get("gamma")),
        "" if is_missing(row.get("hp")) else str(row.get("hp")),
        missing_first(row.get("seed")),
    )


def sort_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Cells in display order (see `cell_rank`); gamma sorts numerically, not inside the hp slug."""
    if cells.empty:
        return cells
    columns = [c for c in RANK_COLUMNS if c in cells]
    ranks = [cell_rank(row) for row in cells[columns].to_dict("records")]
    order = sorted(range(len(cells)), key=ranks.__getitem__)
    return cells.iloc[order]


def dataset_order(cells: pd.DataFrame) -> tuple[list[str], dict[str, list[str]]]:
    """Datasets ordered by group (GROUP_ORDER first, then by name; ungrouped last) then by name,
    and the datasets of each group, in that order."""
    groups: dict[str, list[str]] = {}
    ungrouped = []
    for dataset, of_dataset in cells.groupby("dataset", sort=True):
        named = of_dataset["group"].dropna()
        if named.empty:
            ungrouped.append(dataset)
        else:
            groups.setdefault(str(named.mode().iloc[0]), []).append(dataset)
    ranked = sorted(
        groups, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g)
    )
    groups = {g: groups[g] for g in ranked}
    return [d for g in groups for d in groups[g]] + ungrouped, groups
