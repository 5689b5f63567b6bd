"""A searched method entry, validated: its domains, objectives, constraints, budget and sampler.

    methods:
      eagle2_search:
        method: eagle2
        depth: {low: 2, high: 8}              # an integer range
        top_k: [2, 4, 8]                      # choices
        total_tokens: {low: 8, high: 64, log: true}
        search: {budget: 24, per_round: 8, seed: 0}

Everything but `search` and `method` is a domain (a list: choices; `{low, high}`, optionally
`log: true` and, for floats, `step`: a range) or a fixed value. Errors name the key and what was
expected, before any job.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import math
import re
from dataclasses import dataclass, field

from mmspec.methods import registry
from mmspec.schema import ConfigError
from mmspec.sweep.cell_metrics import CELL_METRICS

SEARCH_KEY = "search"
SAMPLERS = ("tpe", "nsga2", "gp", "qnehvi", "random")
# benchmarks/bench_search.py compares them (docs/performance.md, "Searches")
DEFAULT_SAMPLER = "tpe"
DEFAULT_OBJECTIVES = ("speedup", "quality")
DEFAULT_PER_ROUND = 8
RANGE_KEYS = {"low", "high", "log", "step"}
_NUMBER = r"[-+]?[0-9.]+(?:[eE][-+]?\d+)?"
_CONSTRAINT = re.compile(rf"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=)\s*({_NUMBER})\s*$")
_METRICS = {m.name: m for m in CELL_METRICS}


def is_searched(entry: dict) -> bool:
    """Whether a method entry is searched (has a `search` block) rather than a grid."""
    return isinstance(entry, dict) and SEARCH_KEY in entry


@dataclass(frozen=True)
class Domain:
    """The values one searched hyperparameter may take: choices, or a range."""

    key: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    integer: bool = False
    log: bool = False
    step: float | None = None

    def values(self) -> list | None:
        """Every value, when finitely many (choices, integers, a float range with a step)."""
        if self.choices is not None:
            return list(self.choices)
        if self.integer:
            return list(range(int(self.low), int(self.high) + 1))
        if self.step is not None:
            n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            return [round(self.low + i * self.step, 12) for i in range(n)]
        return None

    def corners(self) -> list:
        """The values whose cells stand for the domain in checks: each choice, or both ends."""
        return list(self.choices) if self.choices is not None else [self.low, self.high]

    def describe(self) -> dict:
        if self.choices is not None:
            return {"choices": list(self.choices)}
        out = {"low": self.low, "high": self.high, "integer": self.integer, "log": self.log}
        return out if self.step is None else {**out, "step": self.step}


@dataclass(frozen=True)
class Objective:
    """A cells-table metric the search improves, in its declared direction."""

    metric: str

    @property
    def maximize(self) -> bool:
        return _METRICS[self.metric].better == "higher"

    @property
    def told_as(self) -> str:
        """The column `told` reads: the interval's pessimistic end, or the metric itself."""
        interval = _METRICS[self.metric].interval
        return self.metric if interval is None else interval[0 if self.maximize else 1]

    def told(self, row: dict) -> float:
        """The value the optimizer is told: the pessimistic end of the metric's 95% interval
        where it has one (a point must show it is fast, not be lucky once), else the value."""
        value = row.get(self.told_as)
        if value is not None and not _nan(value):
            return float(value)
        value = row.get(self.metric)
        return math.nan if value is None else float(value)


@dataclass(frozen=True)
class Constraint:
    """`metric >= bound` or `metric <= bound`: a point outside it is infeasible."""

    metric: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"

    def slack(self, row: dict) -> float:
        """<= 0 where the point satisfies it (Optuna's convention); +inf where unmeasured."""
        value = row.get(self.metric)
        if value is None or _nan(value):
            return math.inf
        return self.bound - float(value) if self.op == ">=" else float(value) - self.bound


@dataclass(frozen=True)
class Search:
    """A searched method entry: what varies, what it improves, how many cells it may spend."""

    name: str  # the method entry
    method: str  # the registry method
    fixed: dict = field(hash=False)
    domains: tuple[Domain, ...]
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...]
    budget: int  # points in all (each decoded at every seed of the sweep)
    per_round: int
    seed: int
    sampler: str

    @property
    def rounds(self) -> int:
        return math.ceil(self.budget / self.per_round)

    def round_size(self, round_: int) -> int:
        """Points round `round_` (1-based) proposes: per_round, the last round what is left."""
        return max(0, min(self.per_round, self.budget - (round_ - 1) * self.per_round))

    def grid_size(self) -> int | None:
        """How many points the domains hold, when finitely many."""
        sizes = [d.values() for d in self.domains]
        return None if any(s is None for s in sizes) else math.prod(len(s) for s in sizes)

    def hparams(self, point: dict) -> dict:
        """The method entry's hyperparameters at a point."""
        return {**self.fixed, **point}

    def definition(self) -> dict:
        """Everything that decides the proposals (not the budget: a larger budget only adds
        rounds), as JSON: the round jobs' params."""
        return {
            "method": self.method,
            "fixed": self.fixed,
            "domains": {d.key: d.describe() for d in self.domains},
            "objectives": [o.metric for o in self.objectives],
            "constraints": [c.text for c in self.constraints],
            "per_round": self.per_round,
            "seed": self.seed,
            "sampler": self.sampler,
        }


def of_entry(name: str, entry: dict, temperature: float = 0.0) -> Search:
    """The search of method entry `name`; a ConfigError naming the key on any problem."""
    where = f"config key methods.{name}"
    block = entry[SEARCH_KEY] or {}
    base = entry.get("method", name)
    params = registry.known_params()
    fixed, domains = {}, []
    for key, value in entry.items():
        if key in ("method", SEARCH_KEY):
            continue
        domain = _domain(f"{where}.{key}", key, value, params.get(key))
        if domain is None:
            fixed[key] = value
        else:
            domains.append(domain)
    if not domains:
        raise ConfigError(
            f"{where}: a searched entry gives at least one hyperparameter as a domain (a list of "
            "choices, or {low, high}); with none, drop `search` and list the values"
        )
    objectives = _objectives(f"{where}.search.objectives", block.get("objectives"))
    constraints = tuple(
        parse_constraint(f"{where}.search.constraints[{i}]", text)
        for i, text in enumerate(block.get("constraints", []))
    )
    budget = block.get("budget")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        raise ConfigError(f"{where}.search.budget: the points to decode in all, a positive integer")
    # not capped by the budget: a round's points do not depend on it (a larger budget adds rounds)
    per_round = block.get("per_round", DEFAULT_PER_ROUND)
    if "per_round" in block and per_round > budget:
        raise ConfigError(
            f"{where}.search.per_round: {per_round} points per round is more than the budget "
            f"({budget} points in all)"
        )
    sampler = block.get("sampler", DEFAULT_SAMPLER)
    if sampler not in SAMPLERS:
        raise ConfigError(
            f"{where}.search.sampler: {sampler!r} is not one of {list(SAMPLERS)} (docs/search.md)"
        )
    if sampler == "qnehvi" and importlib.util.find_spec("botorch") is None:
        raise ConfigError(
            f"{where}.search.sampler: qnehvi needs BoTorch, which is not installed "
            "(pip install 'mmspec[search-gp]')"
        )
    search = Search(
        name=name,
        method=base,
        fixed=fixed,
        domains=tuple(sorted(domains, key=lambda d: d.key)),
        objectives=objectives,
        constraints=constraints,
        budget=budget,
        per_round=per_round,
        seed=block.get("seed", 0),
        sampler=sampler,
    )
    size = search.grid_size()
    if size is not None and budget > size:
        raise ConfigError(
            f"{where}.search.budget: {budget} points is more than the {size} points its domains "
            "hold; lower the budget, or list the values in an entry without `search` (a grid)"
        )
    _check_points(where, search, temperature)
    return search


def corner_points(search: Search) -> list[dict]:
    """Points that stand for the space in checks and upstream outputs: every domain at its
    first value, then each domain's other corners (each choice, a range's other end)."""
    first = {d.key: d.corners()[0] for d in search.domains}
    points = [first]
    for d in search.domains:
        for value in d.corners()[1:]:
            points.append({**first, d.key: value})
    return points


def _domain(where: str, key: str, value, param) -> Domain | None:
    """The domain `value` gives `key`, or None for a fixed value."""
    if key == "paths" and _is_tree(value):
        return None  # a static tree is one value
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where}: an empty list of choices")
        if any(isinstance(v, (list, dict)) for v in value):
            raise ConfigError(
                f"{where}: choices of a searched key are numbers, strings or booleans; give "
                "structured values (trees, weight lists) as a grid in an entry without `search`"
            )
        if len(set(map(repr, value))) != len(value):
            raise ConfigError(f"{where}: the choices {value} repeat a value")
        if param is not None:
            for v in value:
                problem = param.problem(v)
                if problem:
                    raise ConfigError(f"{where}: {problem}")
        return Domain(key, choices=tuple(value))
    if not isinstance(value, dict):
        return None
    unknown = set(value) - RANGE_KEYS
    if unknown or not {"low", "high"} <= set(value):
        raise ConfigError(
            f"{where}: a range is {{low, high}} with optional log: true and step (floats); "
            f"got keys {sorted(value)}"
        )
    low, high = value["low"], value["high"]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        raise ConfigError(f"{where}: a range's low and high are numbers, got {low!r}, {high!r}")
    if param is not None and (param.choices is not None or param.type in (str, bool)):
        choices = f" (one of {list(param.choices)})" if param.choices else ""
        raise ConfigError(
            f"{where}: {key} is categorical{choices}: give its values as a list of choices, "
            "not a range"
        )
    if low >= high:
        raise ConfigError(f"{where}: a range needs low < high, got low={low}, high={high}")
    integer = isinstance(low, int) and isinstance(high, int) and "step" not in value
    if param is not None and param.type is int and not integer:
        raise ConfigError(
            f"{where}: {key} is an integer; give the range integer bounds (and no step)"
        )
    log = bool(value.get("log", False))
    if log and low <= 0:
        raise ConfigError(f"{where}: a log range needs low > 0, got {low}")
    step = value.get("step")
    if step is not None and (log or not isinstance(step, (int, float)) or step <= 0):
        raise ConfigError(f"{where}: step is a positive number, and not with log: true")
    if param is not None:
        for end in (low, high):
            problem = param.problem(int(end) if integer else float(end))
            if problem:
                raise ConfigError(f"{where}: {problem}")
    if integer:
        return Domain(key, low=int(low), high=int(high), integer=True, log=log)
    return Domain(key, low=float(low), high=float(high), log=log, step=step)


def _is_tree(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, list) and all(isinstance(i, int) for i in p) for p in value)
    )


def _objectives(where: str, names) -> tuple[Objective, ...]:
    names = list(DEFAULT_OBJECTIVES if names is None else names)
    if not names:
        raise ConfigError(f"{where}: at least one cells-table metric to improve")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: {names} names a metric twice")
    for metric in names:
        _check_metric(where, metric, directed=True)
    return tuple(Objective(m) for m in names)


def parse_constraint(where: str, text) -> Constraint:
    """`<metric> >= <number>` (or <=) as a Constraint; a ConfigError naming `where` else."""
    match = _CONSTRAINT.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(
            f"{where}: a constraint reads `<metric> >= <number>` or `<metric> <= <number>` "
            f"(e.g. retention >= 0.99), got {text!r}"
        )
    metric, op, bound = match.groups()
    _check_metric(where, metric, directed=False)
    return Constraint(metric, op, float(bound))


def _check_metric(where: str, metric: str, directed: bool) -> None:
    known = sorted(
        m.name for m in CELL_METRICS if m.better and (m.type.id in _NUMERIC or not directed)
    )
    found = _METRICS.get(metric)
    if found is None or found.type.id not in _NUMERIC or (directed and not found.better):
        close = difflib.get_close_matches(str(metric), known, n=3)
        guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        what = "a metric with a direction" if directed else "a numeric metric"
        raise ConfigError(
            f"{where}: {metric!r} is not {what} of the cells table{guess} "
            f"(objectives: {', '.join(known)}; docs/reference/metrics.md)"
        )


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _numeric_ids() -> set:
    import pyarrow as pa

    return {t.id for t in (pa.float64(), pa.float32(), pa.int64(), pa.int32())}


_NUMERIC = _numeric_ids()


def _check_points(where: str, search: Search, temperature: float) -> None:
    """Resolve the corner points (a combination the method cannot run is an error here, not in
    round 3), and refuse keys no point reads and keys that choose a trained head."""
    read_somewhere = set()
    for point in corner_points(search):
        try:
            spec = registry.resolve(search.method, search.hparams(point), temperature, strict=False)
        except ValueError as e:
            raise ConfigError(f"{where}: at {point} (a corner of the space): {e}") from None
        held = spec.to_dict()
        read_somewhere |= {k for k in search.hparams(point) if k in held}
        trained = set(point) & set(spec.head_training())
        if trained:
            key = sorted(trained)[0]
            raise ConfigError(
                f"{where}.{key}: a training hyperparameter of the drafter's head (each value "
                "trains a head of its own); search the decoding's keys, and give this one as a "
                "grid in entries without `search`"
            )
    for key in itertools.chain(search.fixed, (d.key for d in search.domains)):
        if key not in read_somewhere:
            spec = registry.resolve(search.method, search.fixed, temperature, strict=False)
            raise ConfigError(
                f"{where}: {registry.unread_key_error(key, search.method, spec.params)}"
            )
