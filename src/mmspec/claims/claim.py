"""A paper's claims, written once as data (config/claims/<paper>.yaml), and the cells they read.

A claims file names its paper and lists its claims; each claim says what the paper claims (one
sentence), where the paper states it and with which numbers, which toy preset studies it in full,
the report section that shows it, whether it checks the harness rather than the paper
(`harness`), and its check: a kind (claims/checks.py), the statistic, and
the cells it compares, picked by `Selector`s over the cells table's columns and hyperparameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from mmspec.sweep import cell_metrics

CLAIMS_DIR = Path(__file__).resolve().parents[3] / "config" / "claims"

# statistics that count the decoded tokens themselves: the same on every run of one config, so
# their points decide without an interval (checks.Value.exact)
EXACT = {"lossless_rate", "real_divergences", "draft_visual_tokens", "steps"}
# statistic -> (the cells table's column, its interval's columns or None, higher is better): what
# a check's `stat` (and `dominates`' x and y) may name, the cells metrics (cell_metrics) with a
# direction, the default of a check's `higher`, and a way to decide: an interval, or exact
STATS = {
    m.name: (m.name, m.interval, m.better == "higher")
    for m in cell_metrics.CELL_METRICS
    if m.better and (m.interval or m.name in EXACT)
}
# the cells table's columns a selector may name (besides `hp`, the hyperparameters)
SELECTABLE = (
    "registry_method",
    "method",
    "label",
    "views",
    "weights",
    "tree",
    "acceptance",
    "gamma",
    "pair",
    "dataset",
    "temperature",
)
# what a set of cells is, by default: a claim is checked on each (results folder, dataset, pair,
# temperature, seed) apart; `per` names fewer keys to pool a claim over the others (`mean_over`)
SET_KEYS = ("dataset", "pair", "temperature", "seed")
# kind -> (its required keys, its optional keys)
KINDS = {
    "compare": ({"stat", "a", "b"}, {"higher", "tolerance", "mean_over", "against"}),
    "threshold": ({"stat", "a", "value"}, {"higher", "mean_over"}),
    "rank": ({"stat", "a", "b", "within"}, {"higher", "mean_over"}),
    "order": ({"stat", "cells"}, {"higher", "tolerance"}),
    "trend": ({"stat", "a", "along"}, {"rises", "tolerance"}),
    "dominates": ({"a", "b"}, {"x", "y"}),
    "near": ({"stat", "a", "b", "tolerance"}, set()),
}
# what each kind checks (claims/checks.py decides it; docs/reference/claims.md shows this)
KIND_MEANINGS = {
    "compare": "a's cell beats b's in `stat` (each b's, given a list of selectors); "
    "`tolerance`: a relative margin it must clear; `mean_over: dataset`: compare the means "
    "over the set's datasets rather than one dataset's cells (the mean's interval takes the "
    "datasets' errors as independent; `per` must leave `dataset` out, so that a set holds "
    "several); "
    "`against: mean`: beat the mean of the b cells (TABED's +5% over the single views' mean) "
    "rather than each",
    "threshold": "a's cell is at or beyond `value` in `stat` (`mean_over: dataset`: the mean "
    "over the set's datasets)",
    "rank": "a's cell is among the best `within` of itself and the b cells in `stat` (`within` "
    "2: best or second-best); `mean_over: dataset` as for compare",
    "order": "the `cells` selectors' cells stand in that order of `stat`, each beating the next",
    "trend": "a's cells, ordered by the hyperparameter `along`, rise (or fall: `rises: false`) "
    "in `stat`: by their points at every step, and beyond the intervals from the first setting "
    "to the last (a step inside its intervals does not stop it holding; a step reversed beyond "
    "them fails it)",
    "dominates": "every b cell has an a cell at least as good on both axes (`x`, default tau; "
    "`y`, default retention): a frontier claim",
    "near": "a's cell is within `tolerance` (relative to b's point) of b's in `stat`: holds "
    "when even the farthest ends of the two intervals are that close, fails when the nearest "
    "ends are farther, else inconclusive (two cells with wide intervals cannot hold a tight "
    "tolerance)",
}
CLAIM_KEYS = {"id", "claim", "where", "paper", "check"}
OPTIONAL_CLAIM_KEYS = {
    "datasets", "pairs", "temperatures", "devices", "per", "section", "shown_by", "note",
    "harness",
}  # fmt: skip
# what each key of a claim holds (docs/reference/claims.md)
CLAIM_KEY_MEANINGS = {
    "id": "a name, unique in its file",
    "claim": "what the paper claims, in one sentence",
    "where": "where the paper states it (table, figure, section)",
    "paper": "the paper's own numbers for it",
    "check": "how the scorecard decides it: a `kind` and its keys (below)",
    "datasets": "the datasets it speaks of (default: every dataset)",
    "pairs": "the model pairs it speaks of, by their config names (default: every pair): the "
    "pairs the paper reports it for, so a set of another pair does not make it inconclusive",
    "temperatures": "the temperatures it speaks of (default: every temperature), e.g. [0] for "
    "a greedy-only result",
    "devices": "the devices it speaks of, as names the cells' `device` reads (`A100` matches "
    "`cuda:NVIDIA A100-SXM4-80GB`, not `H100`; whole words, any case): the paper's hardware, "
    "for an absolute speedup that holds on that class of device only (default: every device)",
    "per": f"the keys of a set, some of {', '.join(SET_KEYS)} (default: all of them: a claim is "
    "checked on each dataset, pair, temperature and seed of each results folder apart); fewer "
    "keys pool the others into one set, as `mean_over` needs",
    "section": "the report section (its anchor) that shows it",
    "shown_by": "the toy preset (config/presets/<name>.yaml) that studies it in full",
    "note": "a known deviation, or what the toy world can and cannot show",
    "harness": "true for a check of mmspec itself (an identity that holds by construction): "
    "listed apart, counted in no paper's tally",
}


class ClaimError(ValueError):
    """A claims file that does not say what a check needs; names the file, claim and key."""


@dataclass(frozen=True)
class Selector:
    """Which cells a check reads: each named column equal to its value (or one of a list's), and
    each named hyperparameter (`hp`) equal to its value."""

    columns: dict = field(default_factory=dict)
    hp: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, data, where: str) -> Selector:
        if not isinstance(data, dict) or not data:
            raise ClaimError(f"{where}: a selector is a mapping of cells columns, got {data!r}")
        unknown = sorted(set(data) - set(SELECTABLE) - {"hp"})
        if unknown:
            raise ClaimError(
                f"{where}: unknown selector key(s) {unknown}; known: {[*SELECTABLE, 'hp']}"
            )
        hp = data.get("hp", {})
        if not isinstance(hp, dict):
            raise ClaimError(f"{where}.hp: a mapping of hyperparameters, got {hp!r}")
        return cls({k: v for k, v in data.items() if k != "hp"}, dict(hp))

    def mask(self, cells: pd.DataFrame) -> pd.Series:
        keep = pd.Series(True, index=cells.index)
        for column, value in self.columns.items():
            values = value if isinstance(value, list) else [value]
            keep &= cells[column].isin(values)
        for key, value in self.hp.items():
            values = value if isinstance(value, list) else [value]
            keep &= cells["_hp"].map(lambda h, k=key, vs=values: h.get(k) in vs)
        return keep

    def text(self) -> str:
        parts = [f"{k}={v}" for k, v in {**self.columns, **self.hp}.items()]
        return ", ".join(parts)

    def unknown_names(self) -> list[str]:
        """What it names that no sweep can have: registry methods that are not in the registry
        and hyperparameters no component reads (a typo reads "not applicable" forever)."""
        import difflib

        from mmspec.methods import registry

        found = []
        methods = self.columns.get("registry_method", [])
        for name in methods if isinstance(methods, list) else [methods]:
            if name not in registry.METHODS:
                close = difflib.get_close_matches(str(name), list(registry.METHODS), n=2)
                found.append(f"no registry method is named {name!r}" + guess(close))
        params = registry.known_params()
        keys = [*params, *registry.CHOOSERS, "method"]
        for key, value in self.hp.items():
            if key not in keys:
                close = difflib.get_close_matches(key, keys, n=2)
                found.append(f"no component reads a hyperparameter {key!r}" + guess(close))
            elif key in params:  # a value of another type ("5" for 5) matches no cell
                for one in value if isinstance(value, list) else [value]:
                    problem = params[key].problem(one)
                    if problem:
                        found.append(f"no cell can hold it: {problem}")
        return found


def guess(close: list[str]) -> str:
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


@dataclass(frozen=True)
class Check:
    kind: str
    stat: str  # "" for `dominates` (x and y instead)
    selectors: dict  # "a", "b" (a list for compare), "cells" (order): Selector or list of them
    options: dict  # higher, tolerance, value, along, rises, x, y, mean_over


@dataclass(frozen=True)
class Claim:
    paper: str
    id: str
    claim: str
    where: str  # where the paper states it: "Table 2", "Figure 7, Section 4.2"
    paper_numbers: str  # the paper's own numbers for it
    check: Check
    datasets: tuple[str, ...] = ()  # the datasets it speaks of (empty: every dataset)
    pairs: tuple[str, ...] = ()  # the pairs it speaks of (empty: every pair)
    temperatures: tuple[float, ...] = ()  # the temperatures it speaks of (empty: every one)
    devices: tuple[str, ...] = ()  # the device classes it speaks of (empty: every device)
    per: tuple[str, ...] = SET_KEYS
    section: str = ""  # the report section (anchor) that shows it
    shown_by: str = ""  # the toy preset (config/presets/<name>.yaml) that studies it in full
    note: str = ""  # a known deviation, or what the toy world can and cannot show
    # a check of mmspec itself, not a result of the paper: an identity that holds by
    # construction when the harness is right (lambda 0 is exact SD; a pruned view drafts fewer
    # visual tokens). Its verdict is listed apart and counts in no paper's tally.
    harness: bool = False

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.id}"


def _selectors(value, where: str):
    if isinstance(value, list):
        if not value:
            raise ClaimError(f"{where}: an empty list of selectors")
        return [Selector.parse(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return Selector.parse(value, where)


def parse_check(data, where: str) -> Check:
    if not isinstance(data, dict):
        raise ClaimError(f"{where}: a mapping of `kind` and its keys, got {data!r}")
    kind = data.get("kind")
    if kind not in KINDS:
        raise ClaimError(f"{where}.kind: one of {sorted(KINDS)}, got {kind!r}")
    required, optional = KINDS[kind]
    keys = set(data) - {"kind"}
    missing, unknown = sorted(required - keys), sorted(keys - required - optional)
    if missing:
        also = f" (and takes no {unknown})" if unknown else ""
        raise ClaimError(f"{where}: check {kind} needs {missing}{also}")
    if unknown:
        raise ClaimError(
            f"{where}: check {kind} takes no {unknown} (it takes {sorted(required | optional)})"
        )
    for stat_key in ("stat", "x", "y"):
        if stat_key in data and data[stat_key] not in STATS:
            raise ClaimError(f"{where}.{stat_key}: one of {sorted(STATS)}, got {data[stat_key]!r}")
    for key in ("higher", "rises"):
        if key in data and not isinstance(data[key], bool):
            raise ClaimError(f"{where}.{key}: true or false, got {data[key]!r}")
    for key in ("value", "tolerance"):
        number = data.get(key, 0)
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            raise ClaimError(f"{where}.{key}: a number, got {number!r}")
        if key == "tolerance" and number < 0:
            raise ClaimError(f"{where}.tolerance: at least 0 (a relative margin), got {number!r}")
    if "along" in data and not isinstance(data["along"], str):
        raise ClaimError(f"{where}.along: a hyperparameter's name, got {data['along']!r}")
    if "mean_over" in data and data["mean_over"] != "dataset":
        raise ClaimError(f"{where}.mean_over: only 'dataset', got {data['mean_over']!r}")
    if "against" in data and data["against"] not in ("each", "mean"):
        raise ClaimError(f"{where}.against: 'each' or 'mean', got {data['against']!r}")
    selectors = {k: _selectors(data[k], f"{where}.{k}") for k in ("a", "b", "cells") if k in data}
    if kind == "rank":
        others = selectors["b"] if isinstance(selectors["b"], list) else [selectors["b"]]
        within = data["within"]
        if (
            not isinstance(within, int)
            or isinstance(within, bool)
            or not 1 <= within <= len(others)
        ):
            raise ClaimError(
                f"{where}.within: a whole number from 1 to {len(others)} (the b cells), "
                f"got {within!r}"
            )
    if kind in ("threshold", "trend", "near", "dominates") and isinstance(selectors.get("a"), list):
        raise ClaimError(f"{where}.a: one selector for check {kind}")
    options = {k: v for k, v in data.items() if k not in ("kind", "stat", "a", "b", "cells")}
    return Check(kind, data.get("stat", ""), selectors, options)


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key repeated in one mapping (PyYAML keeps the last value
    silently: a claim with `pairs:` twice would be checked on the second list alone)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is repeated", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def parse_file(path: Path) -> list[Claim]:
    """The claims of one claims file; a ClaimError names the file, the claim and the key."""
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=_UniqueKeys)  # a safe loader
    except yaml.YAMLError as e:
        raise ClaimError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("paper"), str):
        raise ClaimError(f"{path}: a claims file has `paper` (its name) and `claims` (a list)")
    if not isinstance(data.get("claims"), list):
        raise ClaimError(f"{path}: `claims` must be a list")
    claims, seen = [], set()
    for i, entry in enumerate(data["claims"]):
        where = f"{path}: claims[{i}]"
        if not isinstance(entry, dict):
            raise ClaimError(f"{where}: a mapping, got {entry!r}")
        where = f"{path}: claim {entry.get('id', i)!r}"
        missing = sorted(CLAIM_KEYS - set(entry))
        unknown = sorted(set(entry) - CLAIM_KEYS - OPTIONAL_CLAIM_KEYS)
        if missing or unknown:
            what = f"needs {missing}" if missing else f"unknown key(s) {unknown}"
            known = sorted(CLAIM_KEYS | OPTIONAL_CLAIM_KEYS)
            raise ClaimError(f"{where}: {what}; a claim's keys: {known}")
        if entry["id"] in seen:
            raise ClaimError(f"{where}: a second claim with this id")
        seen.add(entry["id"])
        if not isinstance(entry.get("harness", False), bool):
            raise ClaimError(f"{where}.harness: true or false, got {entry['harness']!r}")
        for key in ("datasets", "pairs", "temperatures", "devices"):
            values = entry.get(key, [])
            kind = (int, float) if key == "temperatures" else str
            if not isinstance(values, list) or not all(
                isinstance(v, kind) and not isinstance(v, bool) for v in values
            ):
                what = "numbers" if key == "temperatures" else "names"
                raise ClaimError(f"{where}.{key}: a list of {what}, got {values!r}")
        per = entry.get("per", list(SET_KEYS))
        if not isinstance(per, list) or not set(per) <= set(SET_KEYS):
            raise ClaimError(f"{where}.per: a list of keys of {list(SET_KEYS)}, got {per!r}")
        per = tuple(per)
        means = isinstance(entry["check"], dict) and entry["check"].get("mean_over") == "dataset"
        if means and "dataset" in per:
            raise ClaimError(
                f"{where}.per: the check's `mean_over: dataset` averages over a set's datasets, "
                "and a set holds one dataset while `per` keeps `dataset` (name the other keys: "
                "`per: [pair, temperature, seed]`)"
            )
        claims.append(
            Claim(
                paper=data["paper"],
                id=str(entry["id"]),
                claim=str(entry["claim"]).strip(),
                where=str(entry["where"]),
                paper_numbers=str(entry["paper"]).strip(),
                check=parse_check(entry["check"], f"{where}.check"),
                datasets=tuple(entry.get("datasets", ())),
                pairs=tuple(entry.get("pairs", ())),
                temperatures=tuple(float(t) for t in entry.get("temperatures", ())),
                devices=tuple(entry.get("devices", ())),
                per=per,
                section=str(entry.get("section", "")),
                shown_by=str(entry.get("shown_by", "")),
                note=str(entry.get("note", "")).strip(),
                harness=entry.get("harness", False),
            )
        )
    return claims


def load(folder: Path = CLAIMS_DIR) -> list[Claim]:
    """Every claim of every claims file in `folder`, papers in file order."""
    if not folder.is_dir():
        raise ClaimError(f"{folder}: not a folder (a claims folder holds <paper>.yaml files)")
    files = sorted(folder.glob("*.yaml"))
    if not files:
        raise ClaimError(f"{folder}: no claims files (*.yaml) in this folder")
    return [claim for path in files for claim in parse_file(path)]


def with_hparams(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells with their hyperparameters parsed (column `_hp`), for selectors."""
    return cells.assign(_hp=cells["hparams"].map(lambda h: json.loads(h) if h else {}))
