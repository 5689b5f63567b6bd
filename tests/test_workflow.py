"""The Snakemake workflow end to end on a tiny config: outputs, reruns, and config errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import cell_job_counts, snakemake_cmd

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = snakemake_cmd(workdir, config, *args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def planned_jobs(workdir: Path, config: Path) -> dict[str, int]:
    """Rule -> job count of a dry run, the per-cell stages counted in cells (empty when there
    is nothing to do)."""
    out = snakemake(workdir, config, "--dry-run")
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    if "Nothing to be done" in text:
        return {}
    return cell_job_counts(text, workdir, config)


def write_config(path: Path, change) -> Path:
    cfg = yaml.safe_load(TINY.read_text())
    change(cfg)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run  # conftest: the tiny config run end to end, once per session


def test_end_to_end_writes_cells_and_report(run_dir):
    cells = pq.read_table(run_dir / "results/summary/cells.parquet").to_pylist()
    got = {(c["method"], c["views"], c["gamma"]) for c in cells}
    assert got == {
        ("ar", None, None),
        ("sd", "M", 2),
        ("sd", "T", 2),
        ("tabed_mtcp", "MTCP", 2),
        ("sage", "S", None),  # gamma is a chain's; SAGE grows trees
        ("lvspec", "M", 2),
    }
    captions = pq.read_table(run_dir / "results/captions/toy-captioner/toy_caption.parquet")
    assert captions.num_rows == 3 and all(s > 0 for s in captions.column("caption_s").to_pylist())
    blocks = pq.read_table(run_dir / "results/summary/blocks.parquet").to_pylist()
    ensemble = [b for b in blocks if b["method"] == "tabed_mtcp"]
    assert ensemble and all(len(b["weights"]) == 4 for b in ensemble)
    sage = next(c for c in cells if c["method"] == "sage")
    assert sage["draft_visual_share"] == pytest.approx(1 / 16)  # floor(16 * 0.1) of 16 tokens
    assert next(c for c in cells if c["views"] == "M")["draft_visual_share"] == 1.0
    for c in cells:
        lossless = c["method"] != "lvspec"
        assert c["lossless_rule"] == lossless, c
        if lossless:
            assert c["lossless_rate"] == 1.0, c  # greedy decoding must be lossless
        assert c["n_samples"] == 3 and c["tau"] >= 1.0
        assert c["tau"] == pytest.approx(c["new_tokens"] / c["steps"])  # pooled, emitted only
        assert c["speedup"] > 0 and c["speedup_eq1"] > 0
        assert c["verify_cost"] > 0 and c["speedup_eq1_verify"] > 0
        # the embedded judge scored every answer of every cell, the AR cell's too
        assert c["judge_failures"] == 0 and 0 <= c["judge_score"] <= 5, c
    assert list((run_dir / "results/judge/cache").glob("*.parquet"))  # the judgement shards
    ar = next(c for c in cells if c["method"] == "ar")
    assert ar["tau"] == 1.0 and ar["tree"] is None
    assert {c["tree"] for c in cells} == {None, "chain", "sage"}
    html = (run_dir / "reports/index.html").read_text()
    assert "toy_caption" in html and "<html" in html.lower()
    assert "Loose verification: retention vs speedup" in html


def test_second_run_has_nothing_to_do(run_dir):
    assert planned_jobs(run_dir, TINY) == {}


def test_changing_one_gamma_reruns_only_that_cell(tiny_run, tmp_path):
    # a copy of the shared run (Snakemake's records and the files' times included): the session's
    # other tests read that run as the tiny config left it
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir, symlinks=True)
    before = {p: p.stat().st_mtime_ns for p in (run_dir / "results").rglob("*.parquet")}
    config = write_config(tmp_path / "c.yaml", lambda c: c["methods"]["sd"].update(gamma=[2, 4]))
    plan = planned_jobs(run_dir, config)
    # two new cells (views M and T at gamma 4), judged, then the summary and the scorecard;
    # nothing upstream reruns
    assert plan == {
        "generate": 2,
        "judge": 2,
        "score": 2,
        "aggregate": 1,
        "claims": 1,
        "report": 1,
        "all": 1,
    }
    out = snakemake(run_dir, config)
    assert out.returncode == 0, out.stderr[-3000:]
    after = {p: p.stat().st_mtime_ns for p in before}
    changed = {p.relative_to(run_dir).as_posix() for p in before if after[p] != before[p]}
    # the judge's shared cache is untouched: greedy SD answers as AR did, and those answers were
    # judged already (the new cells' judge jobs made no call)
    summary = {"cells", "blocks", "claims"}
    assert changed == {f"results/summary/{name}.parquet" for name in summary}
    logs = [p for p in (run_dir / "logs/judge").rglob("*.log") if "gamma-4" in str(p)]
    assert len(logs) == 2
    for log in logs:
        assert "(0 judge calls, 0 failed)" in log.read_text(), log
    cells = pq.read_table(run_dir / "results/summary/cells.parquet").to_pylist()
    assert sorted(c["gamma"] for c in cells if c["method"] == "sd") == [2, 2, 4, 4]


def test_generation_setting_reruns_generation_not_training(run_dir, tmp_path):
    config = write_config(tmp_path / "c.yaml", lambda c: c["generation"].update(max_new_tokens=9))
    plan = planned_jobs(run_dir, config)
    assert "toy_model" not in plan and "prepare" not in plan and "cache_visual" not in plan
    assert "caption" not in plan
    assert plan["generate"] == 6  # every cell: ar, sd (M, T), tabed_mtcp, sage, lvspec


def test_misspelled_key_fails_before_any_job(tmp_path):
    config = write_config(tmp_path / "bad.yaml", lambda c: c.update(generaton=c["generation"]))
    workdir = tmp_path / "w"
    workdir.mkdir()
    out = snakemake(workdir, config)
    assert out.returncode != 0
    assert "generaton" in out.stderr and "unknown key" in out.stderr
    assert f"(config from {tmp_path / 'bad.yaml'}" in out.stderr  # the file it came from
    assert not (workdir / "results").exists()


def test_a_failing_jobs_cause_is_on_the_console(tmp_path):
    """The workflow profile shows a failed job's log, so its one-line error reaches the user
    without opening logs/."""
    # a folder that exists (validation checks that) and holds no data file: its prepare job fails
    missing = tmp_path / "empty_dataset"
    missing.mkdir()
    config = write_config(
        tmp_path / "c.yaml",
        lambda c: c.update(
            datasets={
                "broken": {
                    "source": "hf",
                    "id": str(missing),
                    "split": "test",
                    "columns": {"question": "q", "answer": "a"},
                }
            }
        ),
    )
    out = snakemake(tmp_path / "w", config, "--until", "prepare")
    assert out.returncode != 0
    assert (
        f"mmspec prepare: error: The directory at {missing} doesn't contain any data files"
        in out.stdout + out.stderr
    )
