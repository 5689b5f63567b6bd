"""A sweep's cells table as the scorecard would read it, before anything runs: every cell of the
config (`cells.expand`) with the columns a selector reads, and made-up statistics with
intervals. It answers one question only: which claims a sweep can judge (`applicability`)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from mmspec.cells import expand
from mmspec.claims.checks import NOT_APPLICABLE
from mmspec.claims.claim import STATS, Claim
from mmspec.claims.scorecard import evaluate, summary
from mmspec.methods.registry import label
from mmspec.methods.spec import MethodSpec


def planned_cells(config: dict, seed: int = 0) -> pd.DataFrame:
    """One row per cell of `config`'s sweep, as the aggregate stage would write it, with every
    statistic a claim reads drawn at random (a point inside a finite interval)."""
    rng = np.random.default_rng(seed)
    groups = {name: ds.get("group", "benchmark") for name, ds in config["datasets"].items()}
    rows = []
    for cell in expand(config).cells:
        columns = MethodSpec.parse(cell.spec).columns()
        row = {
            "dataset": cell.dataset,
            "pair": cell.pair,
            "method": cell.method,
            "hp": cell.hp,
            "hparams": json.dumps(cell.spec, sort_keys=True),
            "seed": cell.seed,
            "label": label(cell.method, columns["registry_method"]),
            "group": groups.get(cell.dataset, "benchmark"),
            **columns,
        }
        for column, interval, _ in STATS.values():
            point = float(rng.uniform(1.0, 5.0))
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
