"""A dataset's task metric from config to scores, without decoding: a list-valued answer column
stays a list from prepare to score, the docs' TextVQA example scores VQA accuracy on its stand-in
rows, and a metric or a reference that cannot work stops before anything misleading is written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import yaml
from base_config import base_config
from cell_tables import write_samples

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import TaskMetric
from mmspec.stages import aggregate, prepare, score
from mmspec.storage.tables import PREPARED, SCORES, read_table
from mmspec.sweep import config as mmconfig
from mmspec.sweep.cell_metrics import CELLS
from mmspec.toy import stand_in

ROOT = Path(__file__).resolve().parents[1]
NOKIA = ["nokia", "nokia", "Nokia", "nokia phone", "nokia", "samsung", "nokia", "NOKIA", "nokia"]
NOKIA += ["phone"]


def _spec(path: Path, **changes) -> dict:
    spec = {"source": "hf", "id": str(path), "split": "train"}
    spec["columns"] = {"question": "question", "answer": "answers", "id": "qid"}
    return {**spec, **changes}


def _save(path: Path, answers: list) -> Path:
    """A saved dataset of one question a row, with these answers."""
    ids = [f"q{i}" for i in range(len(answers))]
    rows = {"qid": ids, "question": ["what brand is the phone?"] * len(ids), "answers": answers}
    datasets.Dataset.from_dict(rows).save_to_disk(str(path))
    return path


@pytest.fixture
def phones(tmp_path, offline) -> Path:
    """Two questions with ten human answers each (the second's in another order)."""
    return _save(tmp_path / "phones", [NOKIA, NOKIA[::-1]])


def _prepare(name: str, spec: dict, out: Path) -> list[dict]:
    prepare.run(name, spec, str(out), 0)
    return read_table(out, PREPARED).to_pylist()


def test_a_list_of_answers_stays_a_list_and_scores_as_one(tmp_path, phones):
    """The bug this fixes: an answers column became one JSON string, so "Nokia" against ten
    human answers "nokia", ... scored 0 by exact match."""
    prepared = tmp_path / "prepared.parquet"
    rows = _prepare("phones", _spec(phones), prepared)
    assert [r["references"] for r in rows] == [NOKIA, NOKIA[::-1]]
    assert json.loads(rows[0]["reference"]) == NOKIA  # the judges' text, as before

    ids = [r["sample_id"] for r in rows]
    cell = write_samples(tmp_path / "cell.parquet", "phones", dict.fromkeys(ids, "Nokia"), "m")
    ar = write_samples(tmp_path / "ar.parquet", "phones", dict.fromkeys(ids, "samsung"))
    out = tmp_path / "scores.parquet"
    score.run(cell, ar, str(prepared), "exact_match", str(out))
    scores = read_table(out, SCORES).to_pylist()
    assert [s["quality"] for s in scores] == [1.0, 1.0]
    assert [s["ar_quality"] for s in scores] == [1.0, 1.0]  # one human said samsung
    score.run(cell, ar, str(prepared), "vqa_accuracy", str(out))
    scores = read_table(out, SCORES).to_pylist()
    # 7 of the 10 humans said nokia in some spelling: at least 3 of any 9 agree -> 1.0;
    # 1 said samsung: (9 * 1/3 + 1 * 0) / 10 = 0.3
    assert [s["quality"] for s in scores] == pytest.approx([1.0, 1.0])
    assert [s["ar_quality"] for s in scores] == pytest.approx([0.3, 0.3])


def test_vqa_v2_answer_records_give_their_answers_and_one_text_stays_one(tmp_path, offline):
    records = [
        {"answer": a, "answer_confidence": "yes", "answer_id": i} for i, a in enumerate(NOKIA)
    ]
    rows = _prepare("v2", _spec(_save(tmp_path / "v2", [records])), tmp_path / "v2.parquet")
    assert rows[0]["references"] == NOKIA
    rows = _prepare("one", _spec(_save(tmp_path / "one", ["nokia"])), tmp_path / "one.parquet")
    assert rows[0]["references"] is None and rows[0]["reference"] == "nokia"


@pytest.mark.parametrize(
    ("metric", "answers", "expected"),
    [
        ("toy", [NOKIA], "metric 'toy' takes one reference text, got a list of 10 answers"),
        ("vqa_accuracy", ["nokia"], "takes a list of answers, got one reference text 'nokia'"),
    ],
)
def test_a_reference_the_metric_does_not_take_stops_the_job(
    tmp_path, offline, metric, answers, expected
):
    prepared = tmp_path / "prepared.parquet"
    _prepare("phones", _spec(_save(tmp_path / "phones", answers)), prepared)
    cell = write_samples(tmp_path / "cell.parquet", "phones", {"phones-q0": "nokia"})
    out = tmp_path / "scores.parquet"
    with pytest.raises(ValueError) as info:
        score.run(cell, cell, str(prepared), metric, str(out))
    message = str(info.value)
    assert str(prepared) in message and "sample phones-q0 turn 0" in message
    assert expected in message
    assert not out.exists()


def test_an_answer_list_of_other_things_is_named_at_prepare(tmp_path, offline):
    table = datasets.Dataset.from_dict(
        {"qid": ["a"], "question": ["q"], "answers": [[["nested"], ["lists"]]]}
    )
    table.save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match=r"row 0 \(id 'a'\), column 'answers'\[0\]: .*answer"):
        _prepare("bad", _spec(tmp_path / "bad"), tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_the_docs_textvqa_example_scores_vqa_accuracy_on_its_stand_in(tmp_path, offline):
    """The worked example of docs/writing-a-sweep.md on its rehearsal stand-in: ten human answers
    a question, scored as VQA v2's evaluation scores them."""
    page = (ROOT / "docs" / "writing-a-sweep.md").read_text()
    example = next(b for b in re.findall(r"```yaml\n(.*?)```", page, re.S) if "textvqa:" in b)
    (tmp_path / "textvqa_gamma.yaml").write_text(example)
    config = mmconfig.load_as_snakemake(tmp_path / "textvqa_gamma.yaml")
    spec = config["datasets"]["textvqa"]
    assert spec["metric"] == "vqa_accuracy" and spec["columns"]["answer"] == "answers"
    override = stand_in.write_all(config, tmp_path / "stand_ins", rows=4)["datasets"]["textvqa"]
    prepared = tmp_path / "prepared.parquet"
    rows = _prepare("textvqa", {**spec, **override}, prepared)
    assert [len(r["references"]) for r in rows] == [10, 10, 10, 10]

    # The method gives each row's answer (the stand-in's first, plain spelling) in capitals after
    # an article; AR says "Unanswerable." By hand, with the stand-in's ten humans per row:
    # row 0: all 10 gave the answer -> 1.0; none said unanswerable -> 0.0
    # row 1: 3 gave it -> (7 * 1 + 3 * 2/3) / 10 = 0.9; 2 of the other 7 (shape, colour,
    #        unanswerable, cycled) said unanswerable -> (8 * 2/3 + 2 * 1/3) / 10 = 0.6
    # row 2: 2 gave it -> 0.6; of the other 8, 2 said unanswerable -> 0.6
    # row 3: 1 gave it -> (9 * 1/3) / 10 = 0.3; of the other 9, 3 said unanswerable -> 0.9
    answers = {r["sample_id"]: f"The {r['references'][0].upper()}." for r in rows}
    cell = write_samples(tmp_path / "cell.parquet", "textvqa", answers, method="sd_chain")
    ar = write_samples(tmp_path / "ar.parquet", "textvqa", {k: "Unanswerable." for k in answers})
    scores = tmp_path / "scores.parquet"
    score.run(cell, ar, str(prepared), spec["metric"], str(scores))
    scored = read_table(scores, SCORES).to_pylist()
    assert [s["quality"] for s in scored] == pytest.approx([1.0, 0.9, 0.6, 0.3])
    assert [s["ar_quality"] for s in scored] == pytest.approx([0.0, 0.6, 0.6, 0.9])
    cells = tmp_path / "cells.parquet"
    aggregate.run([str(scores)], str(cells), str(tmp_path / "blocks.parquet"))
    (summary,) = read_table(cells, CELLS).to_pylist()
    assert summary["quality"] == pytest.approx(2.8 / 4)
    assert summary["ar_quality"] == pytest.approx(2.1 / 4)
    assert summary["retention"] == pytest.approx(2.8 / 2.1)
    assert summary["metric"] == "vqa_accuracy"  # which metric the quality is, named


def _hf_config(**spec) -> dict:
    dataset = {"source": "hf", "id": "data/signs", "split": "train"}
    dataset.update(columns={"question": "question", "answer": "answers"}, **spec)
    return base_config(datasets={"signs": dataset})


def test_an_unknown_metric_stops_validation_naming_the_dataset_and_the_known_ones():
    with pytest.raises(mmconfig.ConfigError) as info:
        mmconfig.validate(_hf_config(metric="vqa_acc"), overrides={})
    message = str(info.value)
    assert message.startswith("config key datasets.signs.metric: unknown metric 'vqa_acc'")
    for known in ("'anls'", "'exact_match'", "'rouge_l'", "'vqa_accuracy'"):
        assert known in message
    assert "entry point group mmspec.metrics" in message


def test_a_metric_that_cannot_score_the_dataset_is_refused(monkeypatch):
    conversation = _hf_config(metric="vqa_accuracy", conversation={"column": "turns"})
    with pytest.raises(mmconfig.ConfigError, match="each turn of a conversation has one answer"):
        mmconfig.validate(conversation, overrides={})

    class Error(TaskMetric):
        name = "error_rate"
        higher_is_better = False

    metric_catalog.load()
    monkeypatch.setattr(metric_catalog.CATALOG, "entries", dict(metric_catalog.CATALOG.entries))
    metric_catalog.register(Error)
    with pytest.raises(mmconfig.ConfigError, match="'error_rate' falls as quality rises"):
        mmconfig.validate(_hf_config(metric="error_rate"), overrides={})


def test_validating_a_config_imports_neither_torch_nor_torchmetrics(tmp_path):
    datasets_ = {
        name: {**_hf_config(metric=name)["datasets"]["signs"], "metric": name}
        for name in ("vqa_accuracy", "anls", "rouge_l", "exact_match", "none")
    }
    config = base_config(datasets={**datasets_, "toy_caption": {"source": "toy", "samples": 2}})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    code = (
        "import sys\nfrom mmspec.sweep import cells, config\n"
        "cells.cells(config.load(sys.argv[1]))\n"
        "print(sorted(m for m in ('torch', 'torchmetrics') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
