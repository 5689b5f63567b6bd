"""A code change reruns the stage that runs that code, and only it."""

from __future__ import annotations

import shutil

from mmspec.fingerprint import PACKAGE, STAGE_CODE, fingerprint


def test_editing_scoring_code_changes_only_the_score_fingerprint(tmp_path):
    copy = tmp_path / "mmspec"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = {stage: fingerprint(stage, copy) for stage in STAGE_CODE}
    assert before == {stage: fingerprint(stage) for stage in STAGE_CODE}
    with open(copy / "scoring" / "lossless.py", "a") as f:
        f.write("\n# an edit\n")
    after = {stage: fingerprint(stage, copy) for stage in STAGE_CODE}
    assert [s for s in STAGE_CODE if after[s] != before[s]] == ["score"]


def test_every_listed_source_exists():
    for stage, entries in STAGE_CODE.items():
        for entry in entries:
            assert (PACKAGE / entry).exists(), (stage, entry)
