"""Every claim of a paper can be judged on that paper's own real preset: the preset's cells,
expanded as the workflow would and given made-up statistics, leave no claim not applicable (a
selector that picks several cells, or none, is what makes one so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmspec import config as mmconfig
from mmspec.claims.claim import CLAIMS_DIR, load
from mmspec.claims.planned import not_applicable, planned_cells

PRESETS = Path(__file__).resolve().parents[1] / "config" / "presets"
# paper (a claims file's `paper`) -> its real preset
REAL_PRESETS = {
    "TABED": "tabed",
    "SAGE": "sage",
    "SpecVLM": "specvlm",
    "LANTERN": "lantern",
    "LVSpec": "lvspec",
    "DREAM": "dream",
}


def test_every_claims_file_has_its_real_preset():
    assert {c.paper for c in load(CLAIMS_DIR)} == set(REAL_PRESETS)


@pytest.mark.parametrize("paper", sorted(REAL_PRESETS))
def test_every_claim_applies_on_its_papers_real_preset(paper):
    config = mmconfig.load(PRESETS / f"{REAL_PRESETS[paper]}.yaml")
    claims = [c for c in load(CLAIMS_DIR) if c.paper == paper]
    missing = not_applicable(claims, config)
    assert not missing, "\n".join(f"{k}: {why}" for k, why in missing.items())


def test_planned_cells_carry_the_columns_and_hyperparameters_selectors_read():
    config = mmconfig.load(PRESETS / "tabed.yaml")
    cells = planned_cells(config)
    m = cells[(cells["method"] == "m") & (cells["dataset"] == "pope")]
    m = m[m["pair"] == "llava15_7b_68m"]
    assert sorted(m["gamma"]) == [3, 5, 7] and set(m["views"]) == {"M"}
    assert set(m["temperature"]) == {0.0} and set(m["registry_method"]) == {"m"}
    assert (cells["tau_low"] < cells["tau"]).all() and (cells["tau"] < cells["tau_high"]).all()
    assert set(cells[cells["dataset"] == "vist"]["group"]) == {"ood"}
