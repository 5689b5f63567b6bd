"""A sweep's cells: the grid of each method entry, one cell per distinct decoding (points whose
components read the same values are one cell), their folder names, and the AR cell each is
scored against."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field

from mmspec.decoding.component import TRAINED_HEAD
from mmspec.methods import registry
from mmspec.methods.spec import MethodSpec
from mmspec.models import source as model_source
from mmspec.schema import ConfigError
from mmspec.sweep.model_refs import normalize_model_ref
from mmspec.sweep.search_space import is_searched


@dataclass(frozen=True)
class Cell:
    """One generation job: (dataset, pair, method, hyperparameters, seed)."""

    dataset: str
    pair: str
    method: str  # the config entry's name
    hp: str  # slug of the hyperparameters given in the config
    seed: int
    spec: MethodSpec = field(hash=False, compare=False)  # the resolved method spec

    @property
    def path(self) -> str:
        """The key=value folder of this cell under results/generate and results/score."""
        return (
            f"dataset={self.dataset}/pair={self.pair}/method={self.method}/"
            f"hp={self.hp}/seed={self.seed}"
        )

    def columns(self) -> dict:
        """The cell's identity as the tables' columns: its key and its hyperparameters."""
        return {
            "dataset": self.dataset,
            "pair": self.pair,
            "method": self.method,
            "hp": self.hp,
            "hparams": json.dumps(self.spec.to_dict(), sort_keys=True),
            "seed": self.seed,
        }


def _grid(entry: dict) -> list[dict]:
    """Expand list values of a method entry into the Cartesian product of hyperparameter dicts.

    `paths` (a static tree) is itself a list of lists: it is a grid only when it is a list of
    such trees.
    """
    items = {k: v for k, v in entry.items() if k != "method"}
    keys = sorted(items)

    def grid(key, v):
        if key == "paths":
            is_trees = (
                isinstance(v, list)
                and bool(v)
                and all(isinstance(t, list) and all(isinstance(p, list) for p in t) for t in v)
            )
            return v if is_trees else [v]
        return v if isinstance(v, list) else [v]

    values = [grid(k, items[k]) for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*values)]


def slug(value: str) -> str:
    """A safe, stable, readable path component for any string (HF ids with '/' included)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", value.replace("/", "--")).strip("-")
    if text != value:
        text = f"{text}-{hashlib.sha1(value.encode()).hexdigest()[:6]}"
    return text or "empty"


def hp_slug(hparams: dict) -> str:
    """The slug of a hyperparameter set: sorted key-value pairs, e.g. gamma-5_view-M."""
    if not hparams:
        return "default"
    parts = []
    for key in sorted(hparams):
        value = hparams[key]
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        parts.append(f"{key}-{text}")
    raw = "_".join(parts)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", raw)
    if safe != raw or len(safe) > 120:
        safe = f"{safe[:100]}-{hashlib.sha1(raw.encode()).hexdigest()[:8]}"
    return safe


def model_slug(ref: str) -> str:
    """The folder name of a model reference: its source's (toy:target -> toy-target), else its
    text slugged (org/name -> org--name-<hash>); spellings of one local path share it
    ("./models/tgt" as "models/tgt")."""
    named = model_source.of(ref).folder_name(ref)
    if named is not None:
        return named
    # The rules' `model` wildcard starts with a letter or digit: "../m" must not give "..--m-...".
    # The hash in the slug of such a path keeps it apart from a model named "m".
    return slug(normalize_model_ref(ref)).lstrip("._-") or "empty"


@dataclass(frozen=True)
class Expansion:
    """A sweep's cells, and how many grid points (dataset x pair x method entry x hyperparameter
    point x seed) they came from: points whose components read the same values are one cell."""

    cells: list[Cell]
    grid_points: int

    @property
    def merged(self) -> int:
        """Grid points that decode what another point's cell decodes."""
        return self.grid_points - len(self.cells)


def method_points(name: str, entry: dict, temperature: float) -> list[tuple[str, MethodSpec]]:
    """(hp slug, resolved spec) of each point of a method entry's grid. The slug keys only the
    values the point's components read, so points that differ in keys nobody reads share one
    (the caller keeps the first). A key of the entry read at no point is a ConfigError."""
    base = entry.get("method", name)
    points, read_somewhere = [], set()
    for hparams in _grid(entry):
        try:
            spec = registry.resolve(base, hparams, temperature, strict=False)
        except ValueError as e:
            raise ConfigError(f"config key methods.{name}: {e}") from None
        held = spec.to_dict()
        read = {k: v for k, v in hparams.items() if k in held}
        read_somewhere |= set(read)
        points.append((hp_slug(read), spec))
    for key in entry:
        if key != "method" and key not in read_somewhere:
            spec = points[0][1]
            raise ConfigError(
                f"config key methods.{name}: {registry.unread_key_error(key, base, spec.params)}"
            )
    return points


def expand(config: dict) -> Expansion:
    """Every cell of the sweep's grids, in a stable order, one per distinct decoding (a searched
    entry's cells are proposed in rounds: mmspec.search.rounds)."""
    temperature = config["generation"]["temperature"]
    points = {
        name: method_points(name, entry, temperature)
        for name, entry in config["methods"].items()
        if not is_searched(entry)
    }
    combos: dict[tuple, None] = {}  # (dataset, pair, method entry, seed), once across rules
    for rule in config["sweep"]:
        combos.update(
            dict.fromkeys(
                (dataset, pair, name, int(seed))
                for dataset, pair, name, seed in itertools.product(
                    _pick(rule.get("datasets", "all"), config["datasets"]),
                    _pick(rule.get("pairs", "all"), config["pairs"]),
                    _gridded(rule, config, points),
                    config["seeds"],
                )
            )
        )
    out: dict[tuple, Cell] = {}
    for dataset, pair, name, seed in combos:
        for hp, spec in points[name]:
            out.setdefault(
                (dataset, pair, name, hp, seed), Cell(dataset, pair, name, hp, seed, spec)
            )
    grid_points = sum(len(points[name]) for _, _, name, _ in combos)
    return Expansion(list(out.values()), grid_points)


def check_distinct(swept: list[Cell]) -> None:
    """Two method entries that decode the same thing (the same components reading the same
    values) on the same dataset, pair and seed would spend the same compute twice."""
    seen: dict[tuple, Cell] = {}
    for cell in swept:
        key = (cell.dataset, cell.pair, cell.seed, cell.spec.decoding())
        other = seen.setdefault(key, cell)
        if other is not cell:
            raise ConfigError(
                f"config key methods.{cell.method}: its cell hp={cell.hp} decodes exactly what "
                f"methods.{other.method}'s cell hp={other.hp} decodes on dataset "
                f"{cell.dataset!r}, pair {cell.pair!r}, seed {cell.seed} (the same components "
                "reading the same values); sweep one of them there (a `sweep` rule, or a grid "
                "without that point)"
            )


def check_ar_cells(swept: list[Cell]) -> None:
    """Every cell is scored against the AR cell of its dataset, pair, seed and temperature."""
    ar = {(c.dataset, c.pair, c.seed, c.spec.temperature) for c in swept if c.spec.is_ar}
    for cell in swept:
        if (cell.dataset, cell.pair, cell.seed, cell.spec.temperature) not in ar:
            raise ConfigError(
                f"config key sweep: cell {cell.path} (temperature {cell.spec.temperature}) "
                "needs an `ar` cell with the same dataset, pair, seed and temperature: its "
                "speedup's AR timing, lossless check and quality retention; sweep `ar` (or an "
                "entry of it at that temperature) there too, in sweep or sweep_extra"
            )


def cells(config: dict) -> list[Cell]:
    """Every cell of the sweep, in a stable order, one per distinct decoding."""
    return expand(config).cells


def ar_cell(config: dict, cell: Cell) -> Cell:
    """The AR cell that `cell` is compared against (same dataset, pair, seed, temperature)."""
    for other in cells(config):
        if (
            other.spec.method == "ar"
            and (other.dataset, other.pair, other.seed) == (cell.dataset, cell.pair, cell.seed)
            and other.spec.temperature == cell.spec.temperature
        ):
            return other
    raise ConfigError(
        f"cell {cell.path} needs an `ar` cell with the same dataset, pair, seed and temperature "
        "for its lossless check and quality retention: add `ar: {}` to methods"
    )


def _gridded(rule: dict, config: dict, points: dict) -> list[str]:
    """The method entries of a sweep row that are grids (not searched)."""
    return [m for m in _pick(rule.get("methods", "all"), config["methods"]) if m in points]


def _pick(names, section: dict) -> list[str]:
    return list(section) if names == "all" else list(names)


def drafter_dir(cell) -> str | None:
    """Where the trained head of a cell's head drafter lives (None for other drafters): one
    per (pair, kind, training hyperparameters), shared by every method that drafts with it."""
    if not cell.spec.needs(TRAINED_HEAD):
        return None
    kind, training = cell.spec.drafter, hp_slug(cell.spec.head_training())
    return f"results/drafters/{cell.pair}/{kind}/{training}"
