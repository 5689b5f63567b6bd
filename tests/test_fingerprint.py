"""A code change reruns the stage that runs that code, and only it: each stage's fingerprint is
the import closure of its module (mmspec.plugins.import_closure), read from import statements."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest

from mmspec import commands
from mmspec.plugins import import_closure
from mmspec.workflow.fingerprint import PACKAGE, fingerprint, stage_closure

STAGES = list(commands.declared())


@pytest.fixture
def copy(tmp_path) -> Path:
    """A copy of the package (its fingerprints are the original's until it is edited)."""
    target = tmp_path / "mmspec"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_editing_scoring_code_changes_only_the_score_fingerprint(copy):
    before = {stage: fingerprint(stage, copy) for stage in STAGES}
    assert before == {stage: fingerprint(stage) for stage in STAGES}
    with open(copy / "scoring" / "image_metrics.py", "a") as f:
        f.write("\n# an edit\n")
    after = {stage: fingerprint(stage, copy) for stage in STAGES}
    assert [s for s in STAGES if after[s] != before[s]] == ["score"]


def test_a_new_helper_module_is_covered_once_a_stage_imports_it(copy):
    """No list to keep by hand: a module the stage's code imports (here inside a function, as
    a lazy import) joins its fingerprint, and editing it reruns the stage."""
    before = fingerprint("score", copy)
    (copy / "scoring" / "helper_of_tests.py").write_text("WEIGHT = 1\n")
    assert fingerprint("score", copy) == before  # not imported by anything yet
    with open(copy / "scoring" / "image_metrics.py", "a") as f:
        f.write("\n\ndef _weight():\n    from mmspec.scoring.helper_of_tests import WEIGHT\n\n"
                "    return WEIGHT\n")  # fmt: skip
    imported = fingerprint("score", copy)
    assert imported != before
    (copy / "scoring" / "helper_of_tests.py").write_text("WEIGHT = 2\n")
    assert fingerprint("score", copy) != imported
    assert fingerprint("generate", copy) == fingerprint("generate")


def test_a_package_init_is_part_of_what_importing_its_modules_runs(copy):
    before = fingerprint("report", copy)
    with open(copy / "report" / "__init__.py", "a") as f:
        f.write("\n# an edit\n")
    assert fingerprint("report", copy) != before


def test_each_stage_covers_what_it_imports_and_not_the_libraries():
    generate = {name for name, _ in stage_closure("generate").modules}
    assert {"mmspec.stages.generate", "mmspec.decoding.loops", "mmspec.methods.runtime"} <= generate
    # the components the catalog imports by name (DYNAMIC_IMPORTS)
    assert {"mmspec.decoding.acceptance.lantern", "mmspec.decoding.drafters.eagle.net"} <= generate
    assert "mmspec.report.page" not in generate and "mmspec.cli" not in generate
    assert "torch" in stage_closure("generate").installed
    assert not any(name.startswith(("torch", "transformers")) for name in generate)


def test_every_import_by_name_in_the_package_is_declared():
    """A module imported from a string cannot be read from import statements: each module of
    mmspec that does so says what it imports in DYNAMIC_IMPORTS (or that it is a library's)."""
    declared = set(import_closure.DYNAMIC_IMPORTS) | set(import_closure.THIRD_PARTY_DYNAMIC)
    found = set()
    for path in PACKAGE.rglob("*.py"):
        code = [line for line in path.read_text().splitlines() if "`" not in line]  # not prose
        if any(re.search(r"import_module\(", line) for line in code):
            module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            found.add(module.removesuffix(".__init__"))
    assert found <= declared, sorted(found - declared)
    assert all(import_closure._resolve(m) for m in declared)


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_closure_follows_relative_parenthesised_and_function_level_imports(tmp_path):
    _package(
        tmp_path,
        {
            "pkg_t/__init__.py": "",
            "pkg_t/component.py": """
                from . import near
                from .sub.deep import (
                    first,  # a comment
                    second,
                )
                import json


                def build():
                    from ..pkg_t_other import late  # noqa: one level too far: not a module
                    import pkg_t.lazy as lazy

                    return lazy
            """,
            "pkg_t/near.py": "X = 1\n",
            "pkg_t/lazy.py": "from .near import X\n",
            "pkg_t/unused.py": "Y = 1\n",
            "pkg_t/sub/__init__.py": "",
            "pkg_t/sub/deep.py": "def first(): ...\ndef second(): ...\n",
        },
    )
    found = import_closure.closure(["pkg_t.component"], search=[tmp_path])
    names = [name for name, _ in found.modules]
    assert names == [
        "pkg_t",
        "pkg_t.component",
        "pkg_t.lazy",
        "pkg_t.near",
        "pkg_t.sub",
        "pkg_t.sub.deep",
    ]
    assert found.installed == ()  # json is the standard library's: neither followed nor kept
    before = found.digest()
    (tmp_path / "pkg_t" / "unused.py").write_text("Y = 2\n")
    assert import_closure.closure(["pkg_t.component"], search=[tmp_path]).digest() == before
    (tmp_path / "pkg_t" / "sub" / "deep.py").write_text("def first(): return 2\n")
    assert import_closure.closure(["pkg_t.component"], search=[tmp_path]).digest() != before


def test_the_digest_names_modules_not_where_they_are_installed(tmp_path):
    files = {"pkg_t/__init__.py": "", "pkg_t/a.py": "from pkg_t import b\n", "pkg_t/b.py": "Z=1\n"}
    _package(tmp_path / "one", files)
    _package(tmp_path / "two", files)
    one = import_closure.closure(["pkg_t.a"], search=[tmp_path / "one"])
    two = import_closure.closure(["pkg_t.a"], search=[tmp_path / "two"])
    assert one.files != two.files and one.digest() == two.digest()


def test_a_package_installed_outside_the_venv_is_recorded_not_hashed(tmp_path, monkeypatch):
    """A system Python's dist-packages (or a cluster module's tree) on sys.path holds installed
    packages: their files are not followed (an upgrade is in `versions`, not a rerun)."""
    installed = tmp_path / "dist-packages"
    _package(installed, {"pkg_dp/__init__.py": "", "pkg_dp/core.py": "X = 1\n"})
    _package(tmp_path / "src", {"pkg_own/__init__.py": "", "pkg_own/a.py": "import pkg_dp.core\n"})
    monkeypatch.syspath_prepend(str(installed))
    import_closure.forget()
    try:
        found = import_closure.closure(["pkg_own.a"], search=[tmp_path / "src"])
    finally:
        monkeypatch.undo()
        import_closure.forget()
    assert [name for name, _ in found.modules] == ["pkg_own", "pkg_own.a"]
    assert found.installed == ("pkg_dp",)
