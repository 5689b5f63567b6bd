"""A sweep's cells table as the scorecard would read it, before anything runs: every cell of the
config (`cells.expand`) with the columns a selector reads, and made-up statistics with
intervals. It answers one question only: which claims a sweep can judge (`applicability`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from mmspec.cells import expand
from mmspec.claims.checks import NOT_APPLICABLE
from mmspec.claims.claim import STATS, Claim
from mmspec.claims.scorecard import evaluate, summary
from mmspec.data import source as dataset_source
from mmspec.methods.registry import label

# statistics of a dialogue's second turns: measured only on datasets that have them
SECOND_TURN_STATS = {"tau_turn2"}


def has_second_turns(name: str, dataset: dict) -> bool:
    """Whether a dataset's samples can have a second turn, by its source (a toy scenario whose
    dialogues do, a dataset read from a multi-turn column)."""
    return dataset_source.of(dataset).has_second_turns(name, dataset)


def planned_cells(config: dict, seed: int = 0) -> pd.DataFrame:
    """One row per cell of `config`'s sweep, as the aggregate stage would write it, with every
    statistic a claim reads drawn at random (a point inside a finite interval); second-turn
    statistics only on datasets with second turns (NaN elsewhere, as measured)."""
    rng = np.random.default_rng(seed)
    groups = {name: ds.get("group", "benchmark") for name, ds in config["datasets"].items()}
    turns = {name: has_second_turns(name, ds) for name, ds in config["datasets"].items()}
    rows = []
    for cell in expand(config).cells:
        columns = cell.spec.columns()
        row = {
            **cell.columns(),
            "label": label(cell.method, columns["registry_method"]),
            "group": groups.get(cell.dataset, "benchmark"),
            **columns,
        }
        for column, interval, _ in STATS.values():
            point = float(rng.uniform(1.0, 5.0))
            if column in SECOND_TURN_STATS and not turns.get(cell.dataset, False):
                point = np.nan
            row[column] = point
            if interval:
                row[interval[0]], row[interval[1]] = point - 0.1, point + 0.1
        rows.append(row)
    return pd.DataFrame(rows)


def not_applicable(claims: list[Claim], config: dict) -> dict[str, str]:
    """The claims (by key) that `config`'s sweep cannot judge, with what is missing: those
    whose every set is not applicable on its planned cells."""
    table = evaluate(claims, {"planned": planned_cells(config)})
    out = {}
    for _, row in summary(table).iterrows():
        if row["verdict"] == NOT_APPLICABLE:
            out[f"{row['paper']}/{row['claim_id']}"] = row["rows"]["measured"].iloc[0]
    return out
