"""A sweep's cells table as the scorecard would read it, before anything runs: every cell of the
config (`cells.expand`) with the columns a selector reads, and made-up statistics with
intervals where the real cells table would hold them (`held`: empty where the dataset or the
cell never measures them). It answers one question only: which claims a sweep can judge
(`not_applicable`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmspec.claims.checks import NOT_APPLICABLE
from mmspec.claims.claim import STATS, Claim
from mmspec.claims.scorecard import evaluate, summary
from mmspec.data import source as dataset_source
from mmspec.methods.registry import label
from mmspec.sweep.cells import expand

# statistics of a dialogue's second turns: measured only on datasets that have them
SECOND_TURN_STATS = {"tau_turn2"}


def has_second_turns(name: str, dataset: dict) -> bool:
    """Whether a dataset's samples can have a second turn, by its source (a toy scenario whose
    dialogues do, a dataset read from a multi-turn column)."""
    return dataset_source.of(dataset).has_second_turns(name, dataset)


def held(config: dict, dataset: str, temperature: float, lossless: bool = True) -> set[str]:
    """The statistics a claim reads (claim.STATS) that the real cells table holds for a cell of
    `dataset` at `temperature` (of a lossless rule or not): quality and retention only under a
    task metric (`metric: none` leaves them empty), the judge's only on judged datasets, FID only
    on image generation, second turns only where dialogues have them, the lossless rate only for
    greedy cells, and the checked divergences only for greedy cells of a lossless rule."""
    from mmspec.sweep.config_checks import never_measured

    entry = config["datasets"][dataset]
    out = {stat for stat in STATS if never_measured(config, dataset, stat) is None}
    if dataset_source.of(entry).metric(dataset, entry) == "none":
        out -= {"retention"}
    if not has_second_turns(dataset, entry):
        out -= SECOND_TURN_STATS
    if temperature > 0:
        out -= {"lossless_rate"}
    if temperature > 0 or not lossless:
        out -= {"real_divergences"}
    return out


def planned_cells(config: dict, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """One row per cell of `config`'s sweep, as the aggregate stage would write it on `device`
    (as the cells name it: `cpu`, `cuda:NVIDIA A100-SXM4-80GB`), with every statistic a claim
    reads that the real cell would hold (`held`) drawn at random (a point inside a finite
    interval), NaN where it would be empty."""
    rng = np.random.default_rng(seed)
    groups = {name: ds.get("group", "benchmark") for name, ds in config["datasets"].items()}
    rows, holds = [], {}
    for cell in expand(config).cells:
        columns = cell.spec.columns()
        row = {
            **cell.columns(),
            "label": label(cell.method, columns["registry_method"]),
            "group": groups.get(cell.dataset, "benchmark"),
            "device": device,
            **columns,
        }
        key = (cell.dataset, float(columns["temperature"]), bool(cell.spec.lossless))
        if key not in holds:
            holds[key] = held(config, *key)
        for stat, (column, interval, _) in STATS.items():
            point = float(rng.uniform(1.0, 5.0)) if stat in holds[key] else np.nan
            row[column] = point
            if interval:
                row[interval[0]], row[interval[1]] = point - 0.1, point + 0.1
        rows.append(row)
    return pd.DataFrame(rows)


def not_applicable(claims: list[Claim], config: dict, device: str = "cpu") -> dict[str, str]:
    """The claims (by key) that `config`'s sweep, run on `device`, cannot judge, with what is
    missing: those with a set (a dataset, pair, temperature and seed holding the cells they name
    first) that is not applicable on its planned cells, or with no set at all (a claim scoped to
    other devices has none)."""
    table = evaluate(claims, {"planned": planned_cells(config, device=device)})
    out = {}
    for _, row in summary(table).iterrows():
        rows = row["rows"]
        missing = rows[rows["verdict"] == NOT_APPLICABLE]
        if len(missing):
            where = missing["set"].iloc[0]
            why = missing["measured"].iloc[0]
            out[f"{row['paper']}/{row['claim_id']}"] = f"{where}: {why}" if where else why
    return out
