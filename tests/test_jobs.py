"""The typed jobs of the cell stages (stages/jobs.py): what the workflow writes is what the stage
reads, defaults come from the schema, and a bad job names its key."""

from __future__ import annotations

import json

import pytest
from base_config import base_config

from mmspec import config as mmconfig
from mmspec.stages.jobs import GenerateJob, Generation, Pair, Timing, TrainDrafterJob


def _config():
    methods = {"ar": {}, "eagle": {"head_data": "toy_caption", "head_steps": 2}}
    return mmconfig.validate(base_config(methods=methods), overrides={})


def test_a_cells_job_round_trips_through_its_json():
    config = _config()
    for cell in mmconfig.cells(config):
        job = GenerateJob.of_cell(config, cell, mmconfig.dataset_task(config, cell.dataset))
        assert GenerateJob.parse(job.to_json()) == job
        assert json.loads(job.to_json())["cell"]["spec"] == cell.spec
        assert (job.pair.target, job.seed, job.hp) == ("toy:target", cell.seed, cell.hp)
        if mmconfig.drafter_dir(cell):
            head = TrainDrafterJob.of_cell(config, cell, "answer")
            assert TrainDrafterJob.parse(head.to_json()) == head
            assert head.kind == "eagle" and head.training["head_steps"] == 2


def test_what_a_hand_written_job_omits_takes_the_schemas_defaults():
    generation = Generation.parse({"max_new_tokens": 5})
    assert (generation.temperature, generation.cfg, generation.top_k) == (0.0, 3.0, 0)
    assert Timing.parse({}) == Timing(warmup_samples=2, threads=1)
    assert Pair.parse({"target": "t"}).dtype == "float32"
    assert Pair.parse({"target": "t", "draft": "t"}).self_draft


@pytest.mark.parametrize(
    ("parse", "data", "key"),
    [
        (Generation.parse, {"max_new_tokens": 5, "max_new": 3}, "generation"),
        (Timing.parse, {"thread": 2}, "timing"),
        (Pair.parse, {"target": "t", "drafts": "d"}, "pair"),
        (Pair.parse, {"draft": "d"}, "pair"),  # a target has no default
    ],
)
def test_a_bad_job_names_its_key(parse, data, key):
    with pytest.raises(ValueError, match=f"job key {key}: "):
        parse(data)
