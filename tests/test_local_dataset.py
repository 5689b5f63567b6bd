"""The local-dataset recipe of docs/writing-a-sweep.md end to end: a folder holding a
metadata.jsonl and PNG images, read through `source: hf`, run through the workflow on tiny toy
models from prepare to the report, and scored by VQA accuracy against each row's ten human
answers. A changed metric rescores without preparing or decoding again; edited answers are read
again with `--forcerun prepare`, as the recipe says."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import PIL.Image
import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import ROOT, cell_job_counts, snakemake_cmd

from mmspec.toy import world as toyworld

QUESTIONS = ["describe the image .", "what colour is the circle ?", "list the shapes ."]
TINY = yaml.safe_load((ROOT / "tests" / "configs" / "tiny.yaml").read_text())


def _sweep(folder: Path, metric: str) -> dict:
    models = {k: TINY["toy"]["models"][k] for k in ("target", "draft")}
    signs = {"source": "hf", "id": str(folder), "split": "train", "image_columns": ["image"]}
    signs.update(columns={"question": "question", "answer": "answers", "id": "qid"}, metric=metric)
    return {
        "seeds": [0],
        "generation": {"max_new_tokens": 6},
        "timing": {"warmup_samples": 0, "threads": 1},
        "toy": {"seed": 0, "models": models},
        "datasets": {"signs": signs},
        "pairs": {"toy": {"target": "toy:target", "draft": "toy:draft"}},
        "methods": {"ar": {}, "sd_chain": {"gamma": 2}},
    }


def _write_dataset(folder: Path, answers: list[list[str]]) -> None:
    """The recipe's layout: images/<n>.png and metadata.jsonl naming them relative to folder."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    lines = []
    for k, (question, humans) in enumerate(zip(QUESTIONS, answers, strict=True)):
        image = f"images/{k:04d}.png"
        PIL.Image.fromarray(toyworld.render(toyworld.random_scene(rng))).save(folder / image)
        row = {"file_name": image, "question": question, "answers": humans, "qid": f"{k:04d}"}
        lines.append(json.dumps(row))
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")


def _run(workdir: Path, sweep: dict, *extra: str) -> subprocess.CompletedProcess:
    path = workdir.parent / f"{workdir.name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    # the datasets library caches what it reads from the folder: in the test's own folder
    env = {**os.environ, "HF_DATASETS_CACHE": str(workdir.parent / "hf-cache")}
    cmd = snakemake_cmd(workdir, path, *extra)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)


def _scores(workdir: Path, method: str) -> list[dict]:
    path = next((workdir / "results" / "score" / "dataset=signs").glob(f"*/method={method}/*/*/*"))
    return sorted(pq.read_table(path).to_pylist(), key=lambda r: r["sample_id"])


@pytest.mark.slow
def test_a_jsonl_dataset_is_prepared_decoded_and_scored_by_its_metric(tmp_path, offline):
    folder, workdir = tmp_path / "signs", tmp_path / "run"
    _write_dataset(folder, [["unanswerable"] * 10] * 3)
    out = _run(workdir, _sweep(folder, "exact_match"), "--until", "score")
    assert out.returncode == 0, out.stderr[-3000:]
    prepared = pq.read_table(workdir / "results" / "prepared" / "signs.parquet").to_pylist()
    assert [r["sample_id"] for r in prepared] == ["signs-0000", "signs-0001", "signs-0002"]
    assert all(r["references"] == ["unanswerable"] * 10 and len(r["images"]) == 1 for r in prepared)
    ar = next((workdir / "results" / "generate" / "dataset=signs").glob("*/method=ar/*/*/*"))
    said = {r["sample_id"]: r["output_text"] for r in pq.read_table(ar).to_pylist()}

    # another metric rescores the decoded answers: nothing is prepared or decoded again
    plan = _run(workdir, _sweep(folder, "vqa_accuracy"), "--dry-run")
    assert plan.returncode == 0, plan.stderr[-3000:]
    jobs = cell_job_counts(
        plan.stdout + plan.stderr, workdir, workdir.parent / f"{workdir.name}.yaml"
    )
    assert jobs.get("score") == 2 and not {"prepare", "generate", "cache_visual"} & set(jobs)

    # Now of each row's ten humans, 4, 3 and 1 give the target's own answer (in spellings that
    # VQA's normalisation folds together) and the rest "unanswerable". By hand, leaving out each
    # human in turn: 4 -> 1.0; 3 -> (7 * 1 + 3 * 2/3) / 10 = 0.9; 1 -> (9 * 1/3) / 10 = 0.3.
    answers = []
    for (_, text), agree in zip(sorted(said.items()), (4, 3, 1), strict=True):
        spellings = [text, text.upper(), f"the {text}", f"{text} ."]
        answers.append(spellings[:agree] + ["unanswerable"] * (10 - agree))
    _write_dataset(folder, answers)
    out = _run(workdir, _sweep(folder, "vqa_accuracy"), "--forcerun", "prepare")
    assert out.returncode == 0, out.stderr[-3000:]
    for method in ("ar", "sd_chain"):  # greedy SD decodes the target's answers exactly
        scores = _scores(workdir, method)
        assert [r["quality"] for r in scores] == pytest.approx([1.0, 0.9, 0.3])
        assert [r["ar_quality"] for r in scores] == pytest.approx([1.0, 0.9, 0.3])
    cells = pq.read_table(workdir / "results" / "summary" / "cells.parquet").to_pylist()
    assert {c["method"]: c["quality"] for c in cells} == pytest.approx(
        {"ar": 2.2 / 3, "sd_chain": 2.2 / 3}
    )
    assert all(c["retention"] == pytest.approx(1.0) for c in cells)
    assert {c["metric"] for c in cells} == {"vqa_accuracy"}
    page = (workdir / "reports" / "index.html").read_text()
    assert "signs" in page and "quality: vqa_accuracy" in page
