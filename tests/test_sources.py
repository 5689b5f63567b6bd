"""Dataset and model sources (`data.source`, `models.source`): a source declared in this file
only is validated, planned, prepared and read through the workflow's own code, and the built-in
sources (Hugging Face and local, the toy world) answer what each part of mmspec asks of them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from mmspec.claims.planned import has_second_turns
from mmspec.data import source as dataset_source
from mmspec.data.media import ANSWER, IMAGE_GENERATION
from mmspec.models import footprint
from mmspec.models import source as model_source
from mmspec.planning import plan
from mmspec.schema import ConfigError
from mmspec.scoring.judge import EmbeddedJudge
from mmspec.stages import prepare
from mmspec.storage.tables import PREPARED, read_table, write_table
from mmspec.sweep import config as mmconfig
from mmspec.sweep import config_checks, model_refs
from mmspec.sweep.cells import model_slug
from mmspec.toy import judge_rubric

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())


class Counting(dataset_source.DatasetSource):
    """Count to `upto`: "what comes after 2 ?" -> "3"."""

    kind = "counting"
    description = "questions about counting, written by a test"

    def entry_schema(self) -> dict:
        return {
            "type": "object",
            "additionalProperties": False,
            "required": ["source", "upto"],
            "properties": {
                "source": {"const": self.kind},
                "upto": {"type": "integer", "minimum": 1},
                "metric": {"type": "string", "default": "exact_match"},
                "group": {"type": "string", "default": "benchmark"},
            },
        }

    def check(self, name: str, entry: dict) -> None:
        if entry["upto"] > 99:
            raise ValueError("`upto` above 99: the toy vocabulary has no such numbers")

    def sample_turns(self, name: str, entry: dict, config: dict) -> int:
        return entry["upto"]

    def prepare(self, name: str, entry: dict, out: str, seed: int) -> int:
        rows = []
        for n in range(1, entry["upto"] + 1):
            user = {"role": "user", "content": [{"type": "text", "text": f"after {n - 1} ?"}]}
            rows.append(
                {
                    "sample_id": f"{name}-{n}",
                    "turn": 0,
                    "scenario": name,
                    "messages": json.dumps([user]),
                    "images": [],
                    "image_ids": [],
                    "reference": str(n),
                    "qa": None,
                }
            )
        write_table(pa.Table.from_pylist(rows, schema=PREPARED), out, PREPARED)
        return len(rows)


class Shelf(model_source.ModelSource):
    """`shelf:<name>`: a model in the test's shelf folder."""

    name = "shelf"
    scheme = "shelf"
    root: Path = Path("shelf")

    def check(self, key: str, ref: str, what: str, config: dict) -> None:
        if self.folder(ref) is None:
            raise ConfigError(f"config key {key}: {what}: nothing on the shelf as {ref!r}")

    def folder(self, ref: str) -> Path | None:
        path = self.root / ref.removeprefix("shelf:")
        return path if (path / "config.json").is_file() else None

    def location(self, ref: str) -> str:
        return str(self.root / ref.removeprefix("shelf:"))


@pytest.fixture
def counting(monkeypatch):
    """The Counting source registered for one test (the catalog as it was afterwards)."""
    dataset_source.load()
    monkeypatch.setattr(dataset_source.CATALOG, "entries", dict(dataset_source.CATALOG.entries))
    dataset_source.register(Counting)


@pytest.fixture
def shelf(monkeypatch, tmp_path):
    """The Shelf source over a folder holding one text-only model's config."""
    model_source.load()
    monkeypatch.setattr(model_source.CATALOG, "entries", dict(model_source.CATALOG.entries))
    monkeypatch.setattr(Shelf, "root", tmp_path)
    model = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 96}
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "config.json").write_text(json.dumps(model))
    model_source.register(Shelf)
    return tmp_path


def _sweep(datasets: dict, pairs: dict | None = None) -> dict:
    sweep = copy.deepcopy(TINY)
    sweep.update(datasets=datasets, methods={"ar": {}, "sd": {"gamma": 2}})
    sweep.pop("judge")
    if pairs is not None:
        sweep["pairs"] = pairs
    return sweep


def test_a_dataset_source_of_a_test_is_validated_planned_prepared_and_read(counting, tmp_path):
    config = mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))
    entry = config["datasets"]["count"]
    assert entry["metric"] == "exact_match"  # its schema's default
    assert config_checks.dataset_task(config, "count") == ANSWER
    assert not has_second_turns("count", entry)
    pairs = plan.plan(config, tmp_path / "results").pairs
    assert pairs["toy"].sample_turns == 3 * pairs["toy"].cells  # known before preparing
    out = tmp_path / "results" / "prepared" / "count.parquet"
    assert prepare.run("count", mmconfig.prepare_entry(entry), str(out), 0) == 3
    rows = read_table(str(out), PREPARED).to_pylist()
    assert [r["reference"] for r in rows] == ["1", "2", "3"]
    prepared = plan.plan(config, tmp_path / "results").pairs
    assert prepared["toy"].sample_turns == 3 * pairs["toy"].cells


def test_a_dataset_source_of_a_test_checks_its_entries(counting):
    with pytest.raises(ConfigError, match=r"datasets.count: `upto` above 99"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 120}}))
    with pytest.raises(ConfigError, match=r"datasets.count"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3, "colour": "red"}}))


def test_an_entry_of_a_source_nobody_declares_is_refused():
    with pytest.raises(ConfigError, match=r"datasets.count"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))


def test_a_model_source_of_a_test_is_checked_sized_and_found(shelf):
    pairs = {"lm": {"target": "shelf:lm", "draft": "shelf:lm"}}
    config = mmconfig.validate(_sweep({"toy_caption": {"source": "toy", "samples": 2}}, pairs))
    assert config["pairs"]["lm"]["target"] == "shelf:lm"
    assert model_refs.language_layers(config, "shelf:lm") == 3
    assert model_refs.model_kind(config, "shelf:lm") is None
    assert model_refs.workflow_output("shelf:lm") is None
    assert model_slug("shelf:lm").startswith("shelf-lm-")
    assert footprint.footprint("shelf:lm", "float32").source == "config"
    with pytest.raises(ConfigError, match=r"pairs.lm.target: pair 'lm', role target: nothing"):
        mmconfig.validate(_sweep({"toy_caption": {"source": "toy"}}, {"lm": {"target": "shelf:x"}}))


def test_a_source_naming_no_task_metric_is_refused_before_any_job(counting, monkeypatch):
    schema = Counting().entry_schema()
    del schema["properties"]["metric"]  # neither declared nor `metric` overridden
    monkeypatch.setattr(Counting, "entry_schema", lambda self: schema)
    with pytest.raises(ConfigError, match=r"datasets.count.metric: source 'counting' names no"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))
    # a source that knows its metric without an entry key is checked through it
    monkeypatch.setattr(Counting, "metric", lambda self, name, entry: "no_such_metric")
    with pytest.raises(ConfigError, match=r"datasets.count.metric: .*no_such_metric"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))


def test_a_size_key_its_entries_cannot_hold_is_refused(counting, monkeypatch):
    monkeypatch.setattr(Counting, "size_key", "limit")  # the schema declares `upto`, not it
    with pytest.raises(ConfigError, match=r"datasets.count: dataset source 'counting' caps"):
        mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))
    monkeypatch.setattr(Counting, "size_key", "upto")
    assert mmconfig.validate(_sweep({"count": {"source": "counting", "upto": 3}}))


def test_the_built_in_dataset_sources_answer_for_their_entries():
    toy, hf = dataset_source.get("toy"), dataset_source.get("hf")
    assert toy.metric("toy_vqa", {"source": "toy"}) == "toy"
    assert toy.task("toy_imagegen", {"source": "toy"}) == IMAGE_GENERATION
    assert toy.task("split", {"source": "toy", "scenario": "toy_imagegen"}) == IMAGE_GENERATION
    assert toy.has_second_turns("dialogues", {"source": "toy", "scenario": "toy_multiturn"})
    assert not toy.has_second_turns("toy_caption", {"source": "toy"})
    config = {"toy": {"seed": 0}}
    assert toy.sample_turns("toy_caption", {"source": "toy", "samples": 5}, config) == 5
    entry = {"source": "hf", "id": "a/b", "split": "test", "metric": "anls", "task": "answer"}
    assert hf.metric("docs", entry) == "anls" and hf.sample_turns("docs", entry, config) is None
    assert hf.has_second_turns("chat", {**entry, "conversation": {"column": "turns"}})
    # the samples an entry asks for, through its own size key; the judge and the questions it asks
    assert (hf.size("docs", {**entry, "limit": 7}), hf.size("docs", entry)) == (7, None)
    assert toy.size("toy_caption", {"source": "toy", "samples": 5}) == 5
    assert (hf.judge("docs", entry), hf.judge("docs", {**entry, "judge": "vdc"})) == (None, "vdc")
    assert not hf.has_qa("docs", entry) and not toy.has_qa("toy_vqa", {"source": "toy"})
    assert hf.has_qa("vdc", {**entry, "columns": {"question": "q", "qa": "qa_list"}})
    with pytest.raises(ValueError, match="columns.question"):
        hf.check("docs", {**entry, "columns": {"answer": "a"}})
    assert dataset_source.rubric() == judge_rubric.__name__
    judge = EmbeddedJudge()  # the embedded judge grades with it
    assert (judge.grader, judge.answerer) == (judge_rubric.grade, judge_rubric.answer)


def test_the_built_in_model_sources_claim_their_references(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tgt").mkdir(parents=True)
    assert model_source.of("toy:target").name == "toy"
    assert model_source.of("llava-hf/llava-1.5-7b-hf").name == "hub"
    for local in ("./models/tgt", "models/tgt", "models/tgt/", "~/m", "/abs/m", "no hub id"):
        assert model_source.of(local).name == "local", local
    assert model_refs.normalize_model_ref("./models/tgt/") == "models/tgt"
    assert model_refs.workflow_output("toy:target") == "results/models/toy/target"
    assert model_slug("toy:target") == "toy-target"


SOURCE_MODULE = """
from mmspec.data.source import DatasetSource
from helper_of_source import ROWS


class Plugged(DatasetSource):
    kind = "plugged"
"""


def _code_of(folder: Path, entry: dict) -> str:
    """The prepare job's extra code fingerprint of `entry`, as a fresh Snakemake parse sees it
    (a new process: fingerprints are computed once per process), with `folder` importable."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from mmspec.data import source\n"
        "import plugged\n"
        "source.register(plugged.Plugged)\n"
        "print(source.plugin_code(json.loads(sys.argv[1])))\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(entry)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout.strip()


def test_editing_a_plugin_source_or_its_helper_reruns_its_prepare_jobs(tmp_path):
    """A plugin source's code (and every module it imports) is part of its datasets' prepare
    fingerprint; mmspec's own sources add nothing (the stage's fingerprint holds them)."""
    (tmp_path / "plugged.py").write_text(SOURCE_MODULE)
    (tmp_path / "helper_of_source.py").write_text("ROWS = 3\n")
    entry = {"source": "plugged"}
    first = _code_of(tmp_path, entry)
    assert first.startswith("+") and _code_of(tmp_path, entry) == first
    (tmp_path / "helper_of_source.py").write_text("ROWS = 4\n")
    second = _code_of(tmp_path, entry)
    assert second.startswith("+") and second != first
    (tmp_path / "plugged.py").write_text(SOURCE_MODULE + "\n# an edit\n")
    assert _code_of(tmp_path, entry) not in (first, second)
    assert dataset_source.plugin_code({"source": "toy"}) == ""
    assert dataset_source.plugin_code({"source": "hf", "id": "x"}) == ""
    assert model_source.plugin_code(["toy:target", "some/hub-model"]) == ""


def _docs_example_source():
    """The dataset source of docs/architecture.md ("A dataset source of your own"), as written."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (code,) = [b for b in blocks if "class JsonlVqa(DatasetSource)" in b]
    scope: dict = {"__name__": "docs_example_source"}
    exec(compile(code, "docs/architecture.md", "exec"), scope)
    return scope["JsonlVqa"]


def test_the_documented_dataset_source_validates_and_prepares(tmp_path, monkeypatch):
    import numpy as np

    from mmspec.data import media

    source = _docs_example_source()
    monkeypatch.setitem(dataset_source.CATALOG.entries, (None, source.kind), source)
    image = tmp_path / "red.png"
    image.write_bytes(media.png_bytes(np.full((32, 32, 3), (220, 20, 20), np.uint8)))
    lines = [
        {"image": str(image), "question": f"what colour ? {i}", "answer": "red"} for i in (1, 2, 3)
    ]
    (tmp_path / "qa.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    entry = {"source": "jsonl_vqa", "path": str(tmp_path / "qa.jsonl"), "n": 2}
    config = copy.deepcopy(TINY)
    config["datasets"] = {"colours": entry}
    checked = mmconfig.validate(config)
    filled = checked["datasets"]["colours"]
    assert filled["metric"] == "exact_match" and filled["group"] == "benchmark"
    assert dataset_source.of(filled).inputs("colours", filled) == [str(tmp_path / "qa.jsonl")]
    out = tmp_path / "prepared.parquet"
    assert prepare.run("colours", filled, str(out), 0) == 2
    rows = read_table(out, PREPARED).to_pylist()
    assert [r["reference"] for r in rows] == ["red", "red"]
    assert rows[0]["image_ids"] == [media.image_id(rows[0]["images"][0])]
    missing = {**entry, "path": str(tmp_path / "nope.jsonl")}
    with pytest.raises(ConfigError, match="no JSONL file at"):
        mmconfig.validate({**config, "datasets": {"colours": missing}})
