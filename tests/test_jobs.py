"""The typed jobs and settings of the stages (sweep/jobs.py, sweep/settings.py): what the
workflow writes is what the stage reads, defaults come from the schema, and a bad job names its
key."""

from __future__ import annotations

import json
import subprocess

import pytest
from base_config import base_config

from mmspec.gpu_check import REPO
from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep.config_checks import dataset_task
from mmspec.sweep.jobs import GenerateJob, TrainDrafterJob
from mmspec.sweep.settings import Captioner, Generation, ImageModels, JudgeSettings, Pair, Timing


def _config():
    methods = {"ar": {}, "eagle": {"head_data": "toy_caption", "head_steps": 2}}
    return mmconfig.validate(base_config(methods=methods), overrides={})


def test_a_cells_job_round_trips_through_its_json():
    config = _config()
    for cell in mmcells.cells(config):
        job = GenerateJob.of_cell(config, cell, dataset_task(config, cell.dataset))
        assert GenerateJob.parse(job.to_json()) == job
        assert json.loads(job.to_json())["cell"]["spec"] == cell.spec.to_dict()
        assert (job.pair.target, job.seed, job.hp) == ("toy:target", cell.seed, cell.hp)
        if mmcells.drafter_dir(cell):
            head = TrainDrafterJob.of_cell(config, cell, "answer")
            assert TrainDrafterJob.parse(head.to_json()) == head
            assert head.kind == "eagle" and head.training["head_steps"] == 2


def test_the_ar_probe_settings_reach_method_cells_jobs_and_not_the_ar_cells():
    """An AR cell's timing is its own decode: changing the probe changes (reruns) the method
    cells' jobs only."""
    jobs = {}
    for probe in (8, 3):
        config = base_config(methods={"ar": {}, "sd": {}})
        config["timing"] = {**config.get("timing", {}), "ar_probe_tokens": probe}
        config = mmconfig.validate(config, overrides={})
        for cell in mmcells.cells(config):
            job = GenerateJob.of_cell(config, cell, dataset_task(config, cell.dataset))
            jobs.setdefault(cell.path, []).append(job.to_json())
    changed = {path for path, (a, b) in jobs.items() if a != b}
    assert changed and changed == {p for p in jobs if "/method=ar/" not in p}


def test_what_a_hand_written_job_omits_takes_the_schemas_defaults():
    generation = Generation.parse({"max_new_tokens": 5})
    assert (generation.max_new_tokens, generation.cfg, generation.top_k) == (5, 3.0, 0)
    assert Timing.parse({}) == Timing(
        warmup_samples=2, threads=1, ar_reference="probe", ar_probe_tokens=8
    )
    assert Pair.parse({"target": "t"}).dtype == "float32"
    assert Pair.parse({"target": "t", "draft": "t"}).self_draft


@pytest.mark.parametrize(
    ("parse", "data", "key"),
    [
        (Generation.parse, {"max_new_tokens": 5, "max_new": 3}, "generation"),
        # the temperature is the method spec's: a job carries it once
        (Generation.parse, {"max_new_tokens": 5, "temperature": 0.7}, "generation.temperature"),
        (Timing.parse, {"thread": 2}, "timing"),
        (Pair.parse, {"target": "t", "drafts": "d"}, "pair"),
        (Pair.parse, {"draft": "d"}, "pair"),  # a target has no default
        (Captioner.parse, {"model": "m", "max_tokens": 3}, "captioner"),
        (JudgeSettings.parse, {"endpoint": "embedded"}, "judge"),  # no model
        (ImageModels.parse, {"fid_features": "toy:f"}, "image_metrics"),
    ],
)
def test_a_bad_job_names_its_key(parse, data, key):
    with pytest.raises(ValueError, match=f"job key {key}: "):
        parse(data)


def test_the_settings_the_workflow_writes_are_the_validated_sections():
    """The JSON of each section's settings is the section as validated, so the typed settings
    leave a sweep's params (and its finished jobs) as they were."""
    import yaml

    with open(REPO / "config" / "config.yaml") as f:  # the tour: a judge, a captioner
        config = mmconfig.validate(yaml.safe_load(f), overrides={})
    sections = {"judge": JudgeSettings, "captioner": Captioner, "image_metrics": ImageModels}
    for key, kind in sections.items():
        settings = kind.parse(config[key])
        assert json.loads(settings.to_json()) == config[key]
        assert kind.parse(settings.to_json()) == settings
    judge = JudgeSettings.parse({"endpoint": "embedded", "model": "m"})
    assert (judge.concurrency, judge.api_key_env, judge.max_retries) == (4, None, 4)


def test_a_stage_names_the_bad_key_of_its_settings_on_the_command_line(tmp_path):
    done = subprocess.run(
        ["mmspec", "caption", "--spec", '{"model": "toy:c", "max_tokens": 3}', "--prepared",
         str(tmp_path / "p.parquet"), "--out", str(tmp_path / "c.parquet")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert "argument --spec: job key captioner: unknown ['max_tokens']" in done.stderr
    assert not (tmp_path / "c.parquet").exists()


def test_a_job_carries_its_temperature_once():
    """The sweep's `generation.temperature` is what each method spec defaults to; the job
    carries the spec's value alone (cell.spec.temperature), which the decode reads."""
    config = base_config(methods={"ar": {}, "sd": {"acceptance": "sampling"}})
    config["generation"] = {**config.get("generation", {}), "temperature": 0.5}
    config = mmconfig.validate(config, overrides={})
    cell = next(c for c in mmcells.cells(config) if not c.spec.is_ar)
    job = GenerateJob.of_cell(config, cell, dataset_task(config, cell.dataset))
    text = job.to_json()
    assert text.count('"temperature"') == 1 and job.spec.temperature == 0.5
    assert GenerateJob.parse(text) == job
