"""A researcher's own task metric from their own package: examples/metric_plugin, installed for
real (pip, into a folder on PYTHONPATH), joins the metric catalog through the entry point group
`mmspec.metrics`; a dataset that names it validates and is scored with it through `mmspec`'s
commands; its source is part of the score jobs' fingerprint; without the package the same
config fails before any job, naming the metric and the entry point group."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml
from base_config import base_config
from cell_tables import write_samples
from workflow_cli import ROOT, job_counts, snakemake_cmd

PLUGIN = ROOT / "examples" / "metric_plugin"
MMSPEC = [sys.executable, "-m", "mmspec.cli"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder the example metric plugin is installed into (with its entry points' metadata)."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build") / "plugin"
    shutil.copytree(PLUGIN, build)  # pip builds in the source folder: keep the repository clean
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(build)],
        check=True,
    )  # fmt: skip
    return target


def _run(cmd: list[str], site: Path | None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture
def charts(tmp_path) -> tuple[Path, Path]:
    """A chart-QA dataset of three numeric and worded answers, and a sweep that scores it with
    the plugin's metric."""
    rows = {"qid": ["a", "b", "c"], "question": ["how many?", "share?", "trend?"]}
    rows["answer"] = ["12", "40%", "Rising"]
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "charts"))
    charts = {"source": "hf", "id": str(tmp_path / "charts"), "split": "train"}
    charts.update(columns={"question": "question", "answer": "answer", "id": "qid"})
    config = base_config(datasets={"charts": {**charts, "metric": "relaxed_accuracy"}})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return tmp_path / "charts", path


def test_the_plugins_metric_joins_the_catalog_and_its_source_the_score_fingerprint(site):
    code = (
        "import inspect\nimport pathlib\n"
        "from mmspec.scoring import metric_catalog\n"
        "metric = metric_catalog.get('relaxed_accuracy')\n"
        "print(metric.__module__, metric_catalog.is_plugin(metric))\n"
        "print(repr(metric_catalog.plugin_code('exact_match')))\n"
        "before = metric_catalog.plugin_code('relaxed_accuracy')\n"
        "source = pathlib.Path(inspect.getsourcefile(metric))\n"
        "source.write_text(source.read_text() + '# edited\\n')\n"
        "metric_catalog.import_closure.forget()\n"  # a process reads one state of the code
        "print(before.startswith('+'), before != metric_catalog.plugin_code('relaxed_accuracy'))\n"
    )
    out = _run([sys.executable, "-c", code], site)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "mmspec_metric_example.relaxed_accuracy True",
        "''",  # mmspec's own metrics are in the score stage's fingerprint already
        "True True",
    ]


def test_a_dataset_that_names_it_validates_and_is_scored_with_it(site, charts, tmp_path):
    _, sweep = charts
    assert _run([*MMSPEC, "cells", str(sweep)], site).returncode == 0
    prepared = tmp_path / "prepared.parquet"
    config = yaml.safe_load(sweep.read_text())
    spec = json.dumps(config["datasets"]["charts"])
    cmd = [*MMSPEC, "prepare", "--name", "charts", "--spec", spec, "--toy-seed", "0"]
    out = _run([*cmd, "--out", str(prepared)], site)
    assert out.returncode == 0, out.stderr
    # ChartQA's relaxed accuracy, by hand: 12.5 is 4.2% off 12 (right), 13 is 8.3% off (wrong);
    # 0.41 is 2.5% off 40% = 0.4 (right), 45% is 12.5% off (wrong); words must be equal, case
    # aside: "rising" is right, "falling" wrong
    cell = write_samples(
        tmp_path / "cell.parquet",
        "charts",
        {"charts-a": "12.5", "charts-b": "0.41", "charts-c": "rising"},
    )
    ar = write_samples(
        tmp_path / "ar.parquet",
        "charts",
        {"charts-a": "13", "charts-b": "45%", "charts-c": "falling"},
    )
    scores = tmp_path / "scores.parquet"
    cmd = [*MMSPEC, "score", "--samples", cell, "--ar-samples", ar, "--prepared", str(prepared)]
    out = _run([*cmd, "--metric", "relaxed_accuracy", "--out", str(scores)], site)
    assert out.returncode == 0, out.stderr
    rows = pq.read_table(scores).to_pylist()
    assert [r["quality"] for r in rows] == [1.0, 1.0, 1.0]
    assert [r["ar_quality"] for r in rows] == [0.0, 0.0, 0.0]


def test_without_the_package_the_config_fails_before_any_job(site, charts, tmp_path):
    _, sweep = charts
    plan = _run(snakemake_cmd(tmp_path / "run", sweep, "--dry-run", "-p"), site)
    assert plan.returncode == 0, plan.stderr[-3000:]
    commands = _run([*MMSPEC, "cells", str(sweep), "--commands", "score"], site)
    assert commands.returncode == 0, commands.stderr[-3000:]
    assert "--metric relaxed_accuracy" in commands.stdout
    missing = _run(snakemake_cmd(tmp_path / "run", sweep, "--dry-run"), None)
    assert missing.returncode != 0
    said = missing.stdout + missing.stderr
    assert "datasets.charts.metric: unknown metric 'relaxed_accuracy'" in said
    assert "entry point group mmspec.metrics" in said
    assert not (tmp_path / "run" / "results").exists()


@pytest.mark.slow
def test_editing_the_plugins_metric_rescores_the_dataset_and_nothing_else(site, charts, tmp_path):
    _, sweep = charts
    cmd = snakemake_cmd(tmp_path / "run", sweep, "--until", "score")
    out = _run(cmd, site)
    assert out.returncode == 0, out.stderr[-3000:]
    scores = next((tmp_path / "run" / "results" / "score").rglob("scores.parquet"))
    assert {r["quality"] for r in pq.read_table(scores).to_pylist()} <= {0.0, 1.0}
    source = next(site.glob("mmspec_metric_example/relaxed_accuracy.py"))
    source.write_text(source.read_text() + "\n# edited\n")
    plan = _run([*cmd, "--dry-run"], site)
    assert plan.returncode == 0, plan.stderr
    assert job_counts(plan.stdout + plan.stderr) == {"score": 1}  # the dataset's one batch
