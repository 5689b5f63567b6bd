"""A code change reruns the stage that runs that code, and only it."""

from __future__ import annotations

import shutil
from pathlib import Path

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


def _imported_files(path: Path) -> set[Path]:
    """The package files `path` imports (at any depth in it), as mmspec modules or packages."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmspec"):
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("mmspec")]
        for name in names:
            if name == "mmspec":  # `from mmspec import x`: x is the module, not the package
                continue
            relative = Path(*name.split(".")[1:])
            for candidate in (
                PACKAGE / relative.with_suffix(".py"),
                PACKAGE / relative / "__init__.py",
            ):
                if candidate.exists():
                    found.add(candidate)
    return found


def test_each_stage_fingerprints_all_the_code_it_imports():
    """A stage's fingerprint covers every package module its code reaches through imports, so
    that editing any of them reruns the stage."""
    for stage, entries in STAGE_CODE.items():
        covered = set()
        for entry in entries:
            target = PACKAGE / entry
            covered |= set(target.rglob("*.py")) if target.is_dir() else {target}
        todo, seen = [PACKAGE / "stages" / f"{stage}.py"], set()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            todo += _imported_files(path)
        ignored = {p for p in seen if p.name == "__init__.py" and not p.read_text().strip()}
        missing = sorted(str(p.relative_to(PACKAGE)) for p in seen - covered - ignored)
        assert not missing, (stage, missing)
