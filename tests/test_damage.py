"""A missing or damaged output of a finished sweep is rebuilt by the same command line, with what
depends on it, and no summary or report counts a cell whose files are gone or damaged.

Every stage's output is tried: toy models, prepared datasets, visual caches, captions, trained
heads, samples, judgements, scores, the summary tables, the claims and the report. Each is
deleted or cut short (a folder output: a file inside it), then the ordinary `snakemake` line
runs; it must plan that output's job and everything downstream of it, and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from workflow_cli import cell_job_counts, job_counts, snakemake_cmd

from mmspec.cli import compare

ROOT = Path(__file__).resolve().parents[1]
CELL = "dataset=toy_caption/pair=toy/method={method}/hp={hp}/seed=0"
SD_M, SD_T = (
    CELL.format(method="sd", hp="gamma-2_views-M"),
    CELL.format(method="sd", hp="gamma-2_views-T"),
)
LVSPEC = CELL.format(method="lvspec", hp="gamma-2_views-M")
SAGE = CELL.format(method="sage", hp="sage_d_max-4")
# what depends on a cell's samples: its judgements and scores, then the sweep's summary
AFTER_A_CELL = {"judge": 1, "score": 1, "aggregate": 1, "claims": 1, "report": 1, "all": 1}
SUMMARY = {"aggregate": 1, "claims": 1, "report": 1, "all": 1}


def snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_cmd(workdir, config, *args), capture_output=True, text=True, cwd=ROOT
    )


def plan(workdir: Path, config: Path) -> tuple[dict[str, int], str]:
    """The dry run's jobs per rule (empty: nothing to do) and what it printed."""
    out = snakemake(workdir, config, "--dry-run")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout + out.stderr
    return ({} if "Nothing to be done" in text else cell_job_counts(text, workdir, config)), text


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """The tiny sweep (every stage but image generation) and an EAGLE head's cell."""
    cfg = yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())
    cfg["datasets"]["toy_caption_train"] = {
        "source": "toy", "scenario": "toy_caption", "samples": 6, "seed": 1000, "group": "train",
    }  # fmt: skip
    cfg["methods"]["eagle_chain"] = {
        "method": "eagle", "tree": "chain", "gamma": 2, "head_data": "toy_caption_train",
        "head_steps": 10, "head_lr": 0.01,
    }  # fmt: skip
    cfg["sweep"] = [{"datasets": ["toy_caption"], "pairs": ["toy"]}]  # the head's data: not swept
    path = tmp_path_factory.mktemp("damage") / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory, config) -> Path:
    workdir = tmp_path_factory.mktemp("finished")
    out = snakemake(workdir, config)
    assert out.returncode == 0, out.stderr[-3000:]
    return workdir


@pytest.fixture
def run(finished, tmp_path) -> Path:
    """A copy of the finished sweep (Snakemake's records included) to damage."""
    workdir = tmp_path / "run"
    shutil.copytree(finished, workdir, symlinks=True)
    return workdir


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def the_head(run: Path) -> Path:
    (head,) = [p.parent for p in (run / "results/drafters").rglob("config.json")]
    return head


def untimed_cells(workdir: Path) -> dict:
    """The summary's rows without what a rerun's timings change."""
    timed = ("_s", "speedup", "latency", "verify_cost", "ratio", "device")
    rows = pq.read_table(workdir / "results/summary/cells.parquet").to_pylist()
    return {
        (r["method"], r["hp"]): {
            k: v
            for k, v in r.items()
            if not any(t in k for t in timed) and v == v  # NaN: out
        }
        for r in rows
    }


def test_damaged_and_missing_cell_files_are_rebuilt_by_the_same_command(finished, run, config):
    results = run / "results"
    (results / "generate" / SD_M / "samples.parquet").unlink()
    truncate(results / "generate" / SD_T / "samples.parquet")
    (results / "judge" / LVSPEC / "judgements.parquet").write_bytes(b"")
    truncate(results / "score" / SAGE / "scores.parquet", keep=0.9)
    truncate(results / "summary/cells.parquet")
    (results / "summary/claims.parquet").unlink()
    truncate(run / "reports/index.html")

    jobs, text = plan(run, config)
    # the two cells' samples (and their judgements, scores), the third cell's judgements (and
    # its scores), the fourth's scores; the summary, claims and report once
    assert jobs == {"generate": 2, "judge": 3, "score": 4, **SUMMARY}
    # a cell's output is checked against its batch's record: that batch runs again
    # (a line per batch, naming its first such output: sd's views M and T share one)
    for damaged, found in (
        (SD_M + "/samples.parquet", "missing"),
        (LVSPEC + "/judgements.parquet", "changed since its job wrote it"),
        (SAGE + "/scores.parquet", "changed since its job wrote it"),
    ):
        assert f"{damaged}: {found}" in text
    assert "its generate job runs again, for the cells not up to date (1 more output" in text
    assert "(no closing </html>)" in text and "cells.parquet: truncated or damaged" in text

    out = snakemake(run, config)
    assert out.returncode == 0, out.stderr[-3000:]
    # the batch job set the damaged samples aside, kept for a look, and decoded the cell again
    assert (results / "generate" / SD_T / "samples.parquet.damaged").exists()
    assert plan(run, config)[0] == {}
    # the same tokens and the same summary as before the damage, recomputed
    same = compare.compare(finished / "results", results)
    assert same.identical and len(same.same) == 7
    assert untimed_cells(run) == untimed_cells(finished)
    assert "</html>" in (run / "reports/index.html").read_text()[-64:]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        # a toy model's weights cut short: its training, then everything that reads it
        ("model", None),
        ("prepared", None),
        # the draft's visual cache: the cells drafting from the draft's visual tokens (sd over
        # view M, tabed_mtcp's M, sage's pruned view, lvspec over M)
        ("draft_visual", {"cache_visual": 1, "generate": 4, "judge": 4, "score": 4, **SUMMARY}),
        # the captions: the cells over view C (tabed_mtcp)
        ("captions", {"caption": 1, "generate": 1, **AFTER_A_CELL}),
        # a file gone from the head's folder: the head, its cell, the report (heads' table)
        ("head_file", {"train_drafter": 1, "generate": 1, **AFTER_A_CELL}),
        ("head", {"train_drafter": 1, "generate": 1, **AFTER_A_CELL}),
    ],
)
def test_each_upstream_output_damaged_or_missing_plans_its_job_and_what_follows(
    run, config, damage, expected
):
    results = run / "results"
    if damage == "model":
        truncate(results / "models/toy/target/model.safetensors")
    elif damage == "prepared":
        (results / "prepared/toy_caption.parquet").unlink()
    elif damage == "draft_visual":
        truncate(results / "visual/toy-draft/toy_caption.parquet")
    elif damage == "captions":
        (results / "captions/toy-captioner/toy_caption.parquet").write_bytes(b"PAR1 PAR1")
    elif damage == "head_file":
        (the_head(run) / "curves.parquet").unlink()
    elif damage == "head":
        shutil.rmtree(the_head(run))
    jobs, text = plan(run, config)
    if damage == "model":
        assert "results/models/toy/target: holds model.safetensors of" in text
        # the target: retrained, so every visual cache of it, every cell and the head
        assert jobs["toy_model"] == 1 and jobs["train_drafter"] == 1 and jobs["generate"] == 7
    elif damage == "prepared":
        # the dataset's visual caches and captions, every cell of it
        assert "toy_model" not in jobs and jobs["prepare"] == 1 and jobs["generate"] == 7
        assert jobs["cache_visual"] == 2 and jobs["caption"] == 1
    else:
        assert jobs == expected
    if damage == "head_file":
        assert "lacks curves.parquet; moved aside to" in text


def test_a_damaged_visual_cache_is_rebuilt_and_the_report_recomputed(finished, run, config):
    """The ordinary command after an upstream file is cut short: that cache, then every cell
    reading it, decodes again to the same tokens, and the summary is recomputed from them."""
    truncate(run / "results/visual/toy-target/toy_caption.parquet")
    samples = sorted((run / "results/generate").rglob("samples.parquet"))
    before = {p: p.stat().st_mtime_ns for p in samples}
    out = snakemake(run, config)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    assert "visual/toy-target/toy_caption.parquet: truncated or damaged" in log
    counts = job_counts(log)
    assert counts["cache_visual"] == 1 and counts["aggregate"] == 1
    decoded = [p for p in samples if p.stat().st_mtime_ns != before[p]]
    assert len(decoded) == 7  # every cell of the dataset, each decoded again
    same = compare.compare(finished / "results", run / "results")
    assert same.identical and len(same.same) == 7
    assert untimed_cells(run) == untimed_cells(finished)


def test_a_table_damaged_inside_fails_its_reader_and_is_rebuilt_on_the_rerun(run, config):
    """Damage the cheap checks before a run cannot see (a bit flipped in a data page) fails the
    job that reads it, which sets the file aside; the same command line then rebuilds it."""
    samples = run / "results/generate" / SD_M / "samples.parquet"
    data = bytearray(samples.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    for at in range(4, len(data) - 8 - footer, 7):
        data[at] ^= 0x01
    written = samples.stat()
    samples.write_bytes(data)
    os.utime(samples, ns=(written.st_atime_ns, written.st_mtime_ns))  # rot: size, time kept
    (run / "results/score" / SD_M / "scores.parquet").unlink()  # its reader must run
    first = snakemake(run, config)
    assert first.returncode != 0
    assert "moved aside to samples.parquet.damaged: rerun the same snakemake" in (
        first.stdout + first.stderr + "".join(p.read_text() for p in (run / "logs").rglob("*.log"))
    )
    again = snakemake(run, config)
    assert again.returncode == 0, again.stderr[-3000:]
    assert plan(run, config)[0] == {}


def _model_folder(tmp_path: Path, manifest: bool = True) -> Path:
    """A tiny model's folder as a stage writes it (with its manifest), or as a copy without."""
    from mmspec.storage import integrity
    from mmspec.toy import tiny

    folder = tiny.save("llava", tmp_path / "model", hidden=16, layers=1, seed=0)
    if manifest:
        integrity.write_manifest(folder)
    return Path(folder)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(data)


def test_weights_changed_in_place_fail_the_job_loading_them_and_are_set_aside(tmp_path):
    """Bytes changed inside a model's weights keep its size, so no check before a run sees
    them; the job loading it checks its manifest's checksums, refuses it and sets it aside."""
    from mmspec.models import loading
    from mmspec.storage import integrity

    folder = _model_folder(tmp_path)
    assert loading.resolve_ref(str(folder)) == str(folder)  # whole: loads as it is
    weights = folder / "model.safetensors"
    _flip(weights, weights.stat().st_size // 2)
    assert integrity.problem(folder) is None  # same sizes: the cheap check passes
    with pytest.raises(integrity.DamagedOutput) as refused:
        loading.resolve_ref(str(folder))
    message = str(refused.value)
    assert "holds model.safetensors, whose bytes are not those its stage wrote" in message
    assert "moved aside to model.damaged: rerun the same snakemake command line" in message
    assert not folder.exists() and (tmp_path / "model.damaged/model.safetensors").exists()
    # a second damage keeps the first one's bytes
    folder = _model_folder(tmp_path)
    _flip(folder / "model.safetensors", 100)
    with pytest.raises(integrity.DamagedOutput, match="moved aside to model.damaged-2"):
        loading.resolve_ref(str(folder))


def test_a_folder_without_its_manifest_is_checked_by_its_files(tmp_path):
    """A copy that left the manifest behind: its weights and tables must still be whole."""
    from mmspec.storage import integrity

    folder = _model_folder(tmp_path, manifest=False)
    assert integrity.problem(folder) is None
    truncate(folder / "model.safetensors", keep=0.7)
    assert "holds model.safetensors, truncated or damaged" in integrity.problem(folder)
    (folder / "model.safetensors").write_bytes(b"\x08" + bytes(7) + b"not json")
    assert "its header is not a safetensors header" in integrity.problem(folder)
