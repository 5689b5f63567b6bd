"""The versioned plugin API: `mmspec.api` exports what plugins use, each name documented on the
generated reference page; a plugin written for API 1 is refused when the catalog loads it, one
refusal per removed hook or name, each naming its replacement and the changelog's migration
section, before any job; the same plugin, ported as that section says, loads and runs exactly."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from plugin_site import install, run
from workflow_cli import ROOT

from mmspec import api
from mmspec.cli import api_reference
from mmspec.decoding import catalog
from mmspec.decoding.component import KINDS
from mmspec.decoding.sampler import seeded
from mmspec.methods import registry, verify
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.plugins import entry_points as plugins

PAGE = ROOT / "docs" / "reference" / "api.md"
CHANGELOG = ROOT / "CHANGELOG.md"
MIGRATION = "CHANGELOG.md, section 'Migration to API 2'"

# A drafter written for plugin API 1 (5e0b15c..95e1e95): built by a `build` classmethod from
# the method's whole spec, stopping early through `exit_below`, which the chain read.
API1_DRAFTER = textwrap.dedent('''
    """The target drafting for itself (its own weights, a cache of its own), stopping where it
    is unsure (written for plugin API 1)."""

    from mmspec.decoding.component import NUMBER, Param
    from mmspec.decoding.decoder import Decoder
    from mmspec.decoding.drafters.model import ModelDrafter


    class ConfidentDraft(ModelDrafter):
        name = "confident_draft"
        params = (Param("confidence", NUMBER, 0.3, "least top-1 probability", low=0, high=1),)
        requires = frozenset()

        @classmethod
        def reads(cls, spec):
            return cls.params

        @classmethod
        def check(cls, spec):
            pass

        @classmethod
        def build(cls, spec, *, target, draft=None, head=None, temperature=0.0):
            drafter = cls(Decoder(target.model), temperature)
            drafter.exit_below = spec["confidence"]
            return drafter
''')
# The same drafter ported as CHANGELOG.md's "Migration to API 2" says: `from_spec` from its own
# values, an `expand` returning None where it stops, DecoderDrafter, imports from mmspec.api.
PORTED_DRAFTER = textwrap.dedent('''
    """The target drafting for itself (its own weights, a cache of its own), stopping where it
    is unsure (plugin API 2)."""

    from mmspec.api import NUMBER, Decoder, DecoderDrafter, Param


    class ConfidentDraft(DecoderDrafter):
        name = "confident_draft"
        params = (Param("confidence", NUMBER, 0.3, "least top-1 probability", low=0, high=1),)
        requires = frozenset()

        @classmethod
        def from_spec(cls, spec, *, target, draft=None, head=None, temperature=0.0):
            return cls(Decoder(target.model), temperature, spec["confidence"])

        def __init__(self, decoder, temperature, confidence):
            super().__init__(decoder, temperature)
            self.confidence = confidence
            self.top = 1.0  # the top-1 probability of the distribution last drafted from

        def root(self, sampler):
            q = super().root(sampler)
            self.top = float(q.max())
            return q

        def expand(self, tree, nodes):
            if self.top < self.confidence:
                return None  # unsure of the last token drafted: propose what is grown
            q = super().expand(tree, nodes)
            self.top = float(q.max())
            return q
''')
METHODS = """
    from mmspec.api import Method

    METHODS = [
        Method(
            "confident_chain",
            "a chain of up to 3 draft tokens, stopping where the draft is unsure",
            {"drafter": "confident_draft", "tree": "chain", "gamma": 3, "acceptance": "greedy"},
        )
    ]
"""


def _swap(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new)


# One plugin written for API 1 per removed hook or name: the ported drafter with that one
# leftover, and what the refusal must name (the leftover and its replacement).
LEFTOVERS = {
    "build": (
        _swap(PORTED_DRAFTER, "def from_spec(", "def build("),
        ["`build`", "from_spec(spec, **context)"],
    ),
    "exit_below": (
        _swap(PORTED_DRAFTER, "self.confidence = confidence", "self.exit_below = confidence"),
        ["`exit_below`", "return None from `expand`"],
    ),
    "training_keys": (
        _swap(
            PORTED_DRAFTER,
            "    def from_spec(",
            "    def training_keys(cls, spec):\n"
            "        return ()\n\n"
            "    @classmethod\n"
            "    def from_spec(",
        ),
        ["`training_keys`", "class attribute `training`"],
    ),
    "acceptance.rules": (
        "from mmspec.decoding.acceptance.rules import Rule\n" + PORTED_DRAFTER,
        ["`mmspec.decoding.acceptance.rules`", "from mmspec.api import AcceptanceRule"],
    ),
    "make_view": (
        "from mmspec.decoding.views import make_view\n" + PORTED_DRAFTER,
        ["`mmspec.decoding.views.make_view`", "the engine builds every component"],
    ),
}


def _plugin(site: Path, package: str, drafter: str, declared: object = None) -> Path:
    """A plugin package `package` (its drafter and method row) installed under `site`;
    `declared`: the text of its `mmspec_api` (None: it declares none)."""
    init = "" if declared is None else f"mmspec_api = {declared}\n"
    return install(
        site,
        package,
        {
            f"{package}/__init__.py": init,
            f"{package}/drafter.py": drafter,
            f"{package}/methods.py": METHODS,
        },
        {
            "mmspec.components": {"confident_draft": f"{package}.drafter:ConfidentDraft"},
            "mmspec.methods": {"confident": f"{package}.methods:METHODS"},
        },
    )


@pytest.fixture
def fresh_catalog(monkeypatch):
    """The built-in catalog, loading the plugins on sys.path again as a new process does."""
    catalog.load()
    monkeypatch.setattr(catalog.CATALOG, "loaded", False)
    monkeypatch.setattr(catalog.CATALOG, "entries", dict(catalog.CATALOG.entries))
    monkeypatch.setattr(catalog.CATALOG, "plugins", {})


def _load(site: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(site))
    catalog.load()


@pytest.mark.parametrize("leftover", sorted(LEFTOVERS))
def test_each_leftover_of_api_1_is_refused_when_the_catalog_loads_it(
    leftover, tmp_path, monkeypatch, fresh_catalog
):
    source, named = LEFTOVERS[leftover]
    package = "api1_" + re.sub(r"\W", "_", leftover)
    site = _plugin(tmp_path, package, source)
    with pytest.raises(catalog.CatalogError) as refused:
        _load(site, monkeypatch)
    message = str(refused.value)
    assert "confident_draft" in message and f"{package}." in message  # the plugin, named
    assert all(part in message for part in named), message
    assert MIGRATION in message and "\n" not in message


@pytest.mark.parametrize(
    ("package", "declared", "named"),
    [
        ("declares_1", 1, ["for plugin API 1", "loads API 2 only", MIGRATION, "mmspec_api = 2"]),
        ("declares_3", 3, ["for plugin API 3", "newer than this mmspec's API 2", "upgrade mmspec"]),
        ("declares_text", "'2'", ["mmspec_api = '2'", "no API version"]),
    ],
)
def test_a_plugin_declaring_another_api_version_is_refused(
    package, declared, named, tmp_path, monkeypatch, fresh_catalog
):
    """Its code is API 2's: only the declared version refuses it."""
    site = _plugin(tmp_path, package, PORTED_DRAFTER, declared=declared)
    with pytest.raises(catalog.CatalogError) as refused:
        _load(site, monkeypatch)
    message = str(refused.value)
    assert f"'confident_draft' ({package}.drafter:ConfidentDraft" in message
    assert all(part in message for part in named), message


def test_the_ported_plugin_joins_the_catalog_and_stops_where_it_is_unsure(
    tmp_path, monkeypatch, fresh_catalog
):
    """Greedy on verify-lossless's tiny random target: AR's tokens whatever it drafts; at
    confidence 1 every proposal stops after its first token (its `expand` returns None), at 0
    it drafts the whole chain of 3."""
    site = _plugin(tmp_path, "ported_in_process", PORTED_DRAFTER, declared=2)
    _load(site, monkeypatch)
    drafter = catalog.get("drafter", "confident_draft")
    assert drafter.__module__ == "ported_in_process.drafter" and catalog.is_plugin(drafter)
    tokenizer = verify.build_tokenizer()
    target, draft = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    sample = Sample(verify.PROMPTS[0], verify.random_images(target, generator), [])
    depths = {}
    for confidence in (0.0, 1.0):
        values = {"drafter": "confident_draft", "confidence": confidence, "gamma": 3}
        runner = MethodRunner(
            registry.resolve("sd_chain", values), target, None, tokenizer, "<image>"
        )
        ar = runner.decode_ar(sample, 16, set(), seeded(0))
        sd = runner.decode(sample, 16, set(), seeded(0))
        assert sd.tokens == ar.tokens
        depths[confidence] = {step.depth for step in sd.steps[:-1]}  # the last may be cut
    assert depths == {0.0: {3}, 1.0: {1}}


def test_a_plugin_declaring_no_version_loads_with_a_line_saying_so(
    tmp_path, monkeypatch, fresh_catalog, capsys
):
    monkeypatch.setattr(plugins, "_UNDECLARED_NAMED", set())
    site = _plugin(tmp_path, "undeclared", PORTED_DRAFTER)
    _load(site, monkeypatch)
    assert catalog.get("drafter", "confident_draft").__module__ == "undeclared.drafter"
    err = capsys.readouterr().err
    assert "'confident_draft' (undeclared.drafter:ConfidentDraft" in err
    assert "declares no mmspec_api: loaded as plugin API 2" in err and MIGRATION in err


# A drafter over the draft model's views with a parameter of its own, as ModelDrafter's
# documentation says to write one: its params beside ModelDrafter's, built through its
# `from_spec`; it drafts a chain no deeper than `depth`.
VIEWS_DRAFTER = """
    from mmspec.api import ModelDrafter, Param


    class ShallowDraft(ModelDrafter):
        name = "shallow_draft"
        params = (*ModelDrafter.params, Param("depth", int, 2, "most tokens drafted", low=1))

        @classmethod
        def from_spec(cls, spec, **context):
            drafter = super().from_spec(spec, **context)
            drafter.depth = spec["depth"]
            return drafter

        def expand(self, tree, nodes):
            return None if tree.depths()[nodes[0]] >= self.depth else super().expand(tree, nodes)
"""


def test_a_model_drafter_of_ones_own_reads_its_parameter_beside_the_views(
    tmp_path, monkeypatch, fresh_catalog
):
    """(A subclass's own parameter was refused, in words that named it the reader.)"""
    site = install(
        tmp_path,
        "shallow",
        {"shallow/__init__.py": "mmspec_api = 2\n", "shallow/drafter.py": VIEWS_DRAFTER},
        {"mmspec.components": {"shallow_draft": "shallow.drafter:ShallowDraft"}},
    )
    _load(site, monkeypatch)
    tokenizer = verify.build_tokenizer()
    target, draft = verify.build_models(0, tokenizer)
    generator = torch.Generator().manual_seed(0)
    images = verify.random_images(target, generator), verify.random_images(draft, generator)
    sample = Sample(verify.PROMPTS[0], *images)
    for views in ("M", "T", "MT"):
        values = {"drafter": "shallow_draft", "views": views, "depth": 2, "gamma": 5}
        spec = registry.resolve("sd_chain", values)
        assert spec.params["depth"] == 2 and spec.params["views"] == views
        runner = MethodRunner(spec, target, draft, tokenizer, "<image>")
        sd = runner.decode(sample, 16, set(), seeded(0))
        assert sd.tokens == runner.decode_ar(sample, 16, set(), seeded(0)).tokens
        assert {step.depth for step in sd.steps[:-1]} == {2}


def test_an_api_1_plugin_stops_mmspec_cells_before_any_job(tmp_path):
    """The plugin as written for API 1 (both of its leftovers named), through the command line
    a sweep starts with: one line naming the plugin and what replaced each leftover."""
    site = _plugin(tmp_path / "site", "api1_whole", API1_DRAFTER)
    config = str(ROOT / "config" / "config.yaml")
    out = run([sys.executable, "-m", "mmspec.cli", "cells", config], site, tmp_path)
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    error = out.stderr.strip().splitlines()[-1]
    assert "api1_whole.drafter:ConfidentDraft" in error
    assert "`build`" in error and "`exit_below`" in error and MIGRATION in error
    assert not (tmp_path / "results").exists() and out.stdout == ""


def test_the_ported_plugin_runs_exactly(tmp_path):
    """Ported as the migration section says, its row runs in `mmspec verify-lossless`: exact at
    temperature 1 on tiny random models, AR's tokens at greedy."""
    site = _plugin(tmp_path, "ported", PORTED_DRAFTER, declared=2)
    cmd = [sys.executable, "-m", "mmspec.cli", "verify-lossless", "--method", "confident_chain"]
    out = run([*cmd, "--tokens", "1"], site)
    assert out.returncode == 0, out.stdout + out.stderr
    name, tvd, greedy, *_ = out.stdout.splitlines()[2].split()
    assert name == "confident_chain" and float(tvd) <= 1e-9 and greedy == "==AR"
    assert " ok " in out.stdout.splitlines()[2]


def test_plugins_declaring_the_api_load_and_others_are_named():
    assert plugins.api_problem(None) is None  # no declaration: held to the hooks alone
    assert plugins.api_problem(plugins.API_VERSION) is None
    assert "written for plugin API 1" in plugins.api_problem(1)
    assert "no API version" in plugins.api_problem(True)  # a bool is no version
    assert api.API_VERSION == plugins.API_VERSION == 2


class _Kangaroo1:
    exit_below = 0.3  # a class attribute of API 1's drafters


def test_no_built_in_component_has_a_leftover_and_a_class_attribute_is_one():
    for kind in KINDS:
        for component in catalog.components(kind).values():
            assert plugins.leftovers(component) is None, component
    assert "_Kangaroo1 still defines `exit_below`" in plugins.leftovers(_Kangaroo1)


def test_every_exported_name_is_documented_on_the_api_page():
    """The page is generated (tests/test_docs.py checks it is current): each name of
    `mmspec.api.__all__` has its own entry, and the members porting asks about are there."""
    text = PAGE.read_text()
    entries = re.findall(r"^### (\w+)$", text, re.M)
    assert sorted(entries) == sorted(api.__all__) and len(entries) == len(set(entries))
    sections = dict(re.findall(r"^### (\w+)\n(.*?)(?=^##)", text + "\n##", re.M | re.S))
    for name, members in {
        "Decoder": ["lm_head", "embed", "head_logits", "stack", "model"],
        "Forward": ["logits", "hidden", "layers"],
        "Drafter": ["from_spec", "start", "root", "expand", "commit", "temperature"],
        "AcceptanceRule": ["judge", "lossless", "lossless_with"],
        "Component": ["check", "reads", "requires"],
    }.items():
        for member in members:
            assert re.search(rf"^- `{member}\b[^`]*`: \S", sections[name], re.M), (name, member)
    # the questions a port asks are answered where they point
    drafter = sections["Drafter"]
    assert "not a `Forward`" in drafter and "not a `Decoder`" in drafter
    assert "row of zeros" in drafter and "float32" in drafter
    assert "`output` is `[first_token]`" in drafter
    assert "`relaxed`, an int" in sections["AcceptanceRule"]
    component = sections["Component"]
    assert "whole resolved values" in component and "spec.of(param)" in component


class Undocumented:
    """A class whose member says nothing."""

    def hook(self) -> None:
        pass


def test_an_undocumented_member_fails_the_page(monkeypatch):
    monkeypatch.setattr(api, "Undocumented", Undocumented, raising=False)
    monkeypatch.setattr(api, "__all__", [*api.__all__, "Undocumented"])
    sections = api_reference._sections(api)
    sections["Extra"] = ["Undocumented"]
    monkeypatch.setattr(api_reference, "_sections", lambda module: sections)
    with pytest.raises(ValueError, match=r"undocumented .*: Undocumented\.hook$"):
        api_reference.page()


def test_importing_the_api_imports_no_torch():
    code = "import sys\nimport mmspec.api\nprint('torch' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr


IMPORT = re.compile(r"^\s*(?:from|import) (mmspec(?:\.\w+)*)\b", re.M)


def test_the_examples_and_the_docs_plugin_code_import_mmspec_api_only():
    sources = {str(p): p.read_text() for p in (ROOT / "examples").rglob("*.py")}
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", architecture, re.S)):
        sources[f"docs/architecture.md block {i}"] = block
    imported = {where: IMPORT.findall(text) for where, text in sources.items()}
    assert {m for found in imported.values() for m in found} == {"mmspec.api"}, imported
    assert sum(map(len, imported.values())) >= 7  # each example module, the documented source


def test_the_changelog_holds_each_version_and_its_migration():
    text = CHANGELOG.read_text()
    assert "## [Unreleased]" in text and "## Plugin API versions" in text
    for version in range(2, plugins.API_VERSION + 1):
        assert f"### Migration to API {version}\n" in text
        assert re.search(rf"^\| {version} \|", text, re.M)
    # every removed hook and name the loader refuses is in the migration table
    removed = [*plugins.REMOVED_HOOKS, *plugins.MOVED_MODULES]
    removed += [name for _, name in plugins.REMOVED_NAMES]
    migration = text.split("### Migration to API 2")[1]
    for name in removed:
        short = name.rsplit(".", 1)[-1] if name.startswith("mmspec.") else name
        assert short in migration, name
