"""A judge the jobs can reach: under a cluster executor the judge jobs run on compute nodes,
where a local-only endpoint names the node itself; such a run stops before any job, saying what
to do. Locally, or with the embedded judge or a host name, nothing is refused."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmspec.scoring.judge.reach import check_reachable, local_only

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://localhost:8000/v1",
        "http://127.0.0.1:8000/v1",
        "http://127.0.1.1/v1",
        "http://[::1]:8000/v1",
        "http://0.0.0.0:8000/v1",
    ],
)
def test_local_only_endpoints(endpoint):
    assert local_only(endpoint)
    with pytest.raises(ValueError, match="reachable on this machine only.*vdd_set"):
        check_reachable(endpoint, ["vdd_set"], local_execution=False)
    check_reachable(endpoint, ["vdd_set"], local_execution=True)  # the jobs run here
    check_reachable(endpoint, [], local_execution=False)  # no judged dataset


@pytest.mark.parametrize(
    "endpoint",
    ["embedded", "http://gpu-017:8000/v1", "https://api.example.org/v1", "http://10.1.2.3/v1"],
)
def test_endpoints_the_nodes_can_reach(endpoint):
    assert not local_only(endpoint)
    check_reachable(endpoint, ["vdd_set"], local_execution=False)


def test_a_cluster_run_with_a_localhost_judge_stops_before_any_job(tmp_path):
    """The tour (a judged video dataset) under the Slurm executor with a judge on localhost: the
    workflow's onstart refuses it (the executor is known only then), and no job runs."""
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "--configfile",
            str(ROOT / "config" / "config.yaml"),
            "--executor",
            "slurm",
            "--jobs",
            "1",
            "--config",
            'judge={endpoint: "http://localhost:8000/v1", model: judge}',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-2000:]
    assert "judge.endpoint http://localhost:8000/v1 is reachable on this machine only" in output
    assert "A judge the jobs can reach" in output
    assert not (tmp_path / "results").exists()  # nothing ran


def test_the_texts_on_the_judge_bound_name_a_profile_that_sets_it():
    """The schema's judge description (hence the configuration reference), the judge rule's
    header and the Slurm page say which profile bounds judge jobs; each profile named there sets
    the `judge` resource (profiles/default, which sets none, was once named)."""
    texts = {
        "config/schema.yaml": yaml.safe_load((ROOT / "config/schema.yaml").read_text()),
        "workflow/rules/judge.smk": (ROOT / "workflow/rules/judge.smk").read_text(),
        "docs/reference/config.md": (ROOT / "docs/reference/config.md").read_text(),
        "docs/running-at-scale.md": (ROOT / "docs/running-at-scale.md").read_text(),
    }
    texts["config/schema.yaml"] = texts["config/schema.yaml"]["properties"]["judge"]["description"]
    named = 0
    for where, text in texts.items():
        for sentence in re.split(r"(?<=\.)\s", text):
            if "judge" not in sentence or "bound" not in sentence and "sets" not in sentence:
                continue
            for profile in re.findall(r"(profiles/\w+/config\.yaml|slurm/config\.yaml)", sentence):
                resources = yaml.safe_load((ROOT / profile).read_text()).get("resources") or []
                assert any(str(r).startswith("judge=") for r in resources), (where, profile)
                named += 1
    assert named >= 3  # the schema, the rule and the reference page each name one
