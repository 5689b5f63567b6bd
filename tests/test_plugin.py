"""A researcher's own components from their own package: examples/plugin, installed for real
(pip, into a folder on PYTHONPATH), joins the catalog through its entry points, runs in a sweep
through the workflow and in `mmspec verify-lossless`, reruns its cells when its code changes,
and is named when it is missing. Nothing of mmspec changes for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import ROOT, job_counts, snakemake_cmd

PLUGIN = ROOT / "examples" / "plugin"
SWEEP = {
    "seeds": [0],
    "generation": {"max_new_tokens": 10, "temperature": 0.0},
    "timing": {"warmup_samples": 0, "threads": 1},
    "toy": {
        "seed": 0,
        "models": {
            "target": {"hidden": 32, "layers": 2, "heads": 2, "steps": 4, "batch_size": 4},
        },
    },
    "datasets": {"toy_caption": {"source": "toy", "samples": 3}},
    "pairs": {"toy": {"target": "toy:target"}},
    "methods": {
        "ar": {},
        "early_exit": {"gamma": 2},  # the plugin's method row: its drafter and mmspec's chain
        "exit_leviathan": {"method": "early_exit_leviathan"},  # and its rule
    },
}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder the example plugin is installed into (with its entry points' metadata)."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build") / "plugin"
    shutil.copytree(PLUGIN, build)  # pip builds in the source folder: keep the repository clean
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(build)],
        check=True,
    )  # fmt: skip
    return target


def _env(site: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def _run(cmd: list[str], site: Path | None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_env(site))


def test_the_plugins_components_join_the_catalog_and_its_methods_the_registry(site):
    code = (
        "from mmspec.decoding import catalog\n"
        "from mmspec.methods import registry\n"
        "print(catalog.get('drafter', 'early_exit').__module__)\n"
        "print(catalog.get('acceptance', 'leviathan').lossless)\n"
        "print(sorted(m.name for m in registry.PLUGIN_METHODS))\n"
        "print(sorted(registry.resolve('sd_chain', {'drafter': 'early_exit'})))\n"
    )
    out = _run([sys.executable, "-c", code], site)
    assert out.returncode == 0, out.stderr
    module, lossless, methods, keys = out.stdout.splitlines()
    assert module == "mmspec_example.early_exit" and lossless == "True"
    assert methods == "['early_exit', 'early_exit_leviathan']"
    # drafting with the plugin's drafter, the row's views are no part of the cell
    assert "exit_layers" in keys and "views" not in keys


def test_verify_lossless_proves_the_plugins_drafter_and_rule(site):
    cmd = [
        sys.executable, "-m", "mmspec.cli", "verify-lossless",
        "--method", "early_exit", "--method", "early_exit_leviathan",
    ]  # fmt: skip
    out = _run(cmd, site)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("early_exit")]
    assert len(lines) == 2 and all(line.split()[-1] in ("ok", "T=1") for line in lines)
    assert all(" ok" in line for line in lines)


@pytest.mark.slow
def test_a_sweep_runs_the_plugin_and_reruns_its_cells_when_its_code_changes(site, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(SWEEP))
    cmd = snakemake_cmd(tmp_path, config, "--until", "aggregate")
    out = _run(cmd, site)
    assert out.returncode == 0, out.stderr[-3000:]
    cells = pq.read_table(tmp_path / "results/summary/cells.parquet").to_pylist()
    drafted = {c["method"]: c for c in cells if c["method"] != "ar"}
    assert set(drafted) == {"early_exit", "exit_leviathan"}
    for cell in drafted.values():  # greedy and lossless: the target's tokens exactly
        assert cell["lossless_rate"] == 1.0 and cell["tau"] >= 1.0, cell

    # editing the plugin's rule reruns the cells that verify with it, and only those
    rule = next(site.glob("mmspec_example/leviathan.py"))
    rule.write_text(rule.read_text() + "\n# edited\n")
    plan = _run([*cmd, "--dry-run"], site)
    assert plan.returncode == 0, plan.stderr
    assert job_counts(plan.stdout + plan.stderr).get("generate") == 1

    # without the package, a config naming its method fails before any job, naming it
    missing = _run([*cmd, "--dry-run"], None)
    assert missing.returncode != 0
    assert "unknown method 'early_exit'" in missing.stdout + missing.stderr
