"""Fetching a sweep's hub models and datasets for offline compute nodes: `mmspec fetch` lists
and downloads them with the real `huggingface_hub` client from a local server speaking the Hub's
protocol (`hub_server`, through HF_ENDPOINT), and the rehearsal then runs to its report with
that cache alone (HF_HUB_OFFLINE=1, the server stopped). A cache lacking a repository, or part
of one, stops the workflow before any job, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml
from hub_server import Hub
from workflow_cli import snakemake_cmd

from mmspec.data.hf_spec import parse_entry
from mmspec.hub import cache as hub_cache
from mmspec.hub.cache import DATASET, MODEL, HubRepo
from mmspec.sweep import config as mmconfig
from mmspec.toy import stand_in, tiny

ROOT = Path(__file__).resolve().parents[1]
SAGE = ROOT / "config" / "presets" / "sage.yaml"
PAIR = "qwen25vl_72b_7b"
TARGET, DRAFT = "Qwen/Qwen2.5-VL-72B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"
TEXTVQA = "lmms-lab/textvqa"
# the preset's own hub ids, its pair in float32 (CPU), one benchmark and two methods; 24 new
# tokens and no warm-up keep the run to plumbing and exactness (the stand-ins are random)
REHEARSAL = {
    "pairs": {PAIR: {"target": TARGET, "draft": DRAFT, "dtype": "float32"}},
    "sweep": [{"datasets": ["textvqa"], "pairs": [PAIR], "methods": ["ar", "sd_chain"]}],
    "generation": {"max_new_tokens": 24},
    "timing": {"warmup_samples": 0},
}


def _hub_dataset(folder: Path, saved: Path, split: str) -> Path:
    """A stand-in saved with save_to_disk, laid out as the Hub holds a dataset: Parquet data
    files of two splits and a card declaring them; the other split is never read."""
    rows = datasets.load_from_disk(str(saved))
    (folder / "data").mkdir(parents=True)
    rows.to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))
    rows.to_parquet(str(folder / "data" / "test-00000-of-00001.parquet"))
    (folder / "other").mkdir()
    (folder / "other" / "unused.parquet").write_bytes(b"not a config's file")
    card = {
        "configs": [
            {
                "config_name": "default",
                "data_files": [
                    {"split": split, "path": f"data/{split}-*"},
                    {"split": "test", "path": "data/test-*"},
                ],
            }
        ]
    }
    (folder / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n# stand-in\n")
    return folder


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """The rehearsal's repositories as the Hub would serve them: tiny Qwen2.5-VL models under
    the preset's ids, TextVQA's stand-in as a Parquet dataset, and a model that also ships
    weights of other frameworks (which no job reads)."""
    root = tmp_path_factory.mktemp("hub")
    target = tiny.save("qwen2_5_vl", root / "target", seed=0)
    draft = tiny.save("qwen2_5_vl", root / "draft", layers=1, seed=1)
    (draft / "flax_model.msgpack").write_bytes(b"\0" * 1000)
    (draft / "pytorch_model.bin").write_bytes(b"\0" * 1000)
    spec = mmconfig.load(SAGE)["datasets"]["textvqa"]
    saved = stand_in.write("textvqa", parse_entry(spec), root / "saved", rows=2)
    textvqa = _hub_dataset(root / "textvqa", saved, spec["split"])
    return {(MODEL, TARGET): target, (MODEL, DRAFT): draft, (DATASET, TEXTVQA): textvqa}


def _env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HOME": str(home), **extra}


def _fetch(tmp_path: Path, env: dict, *extra: str):
    override = tmp_path / "rehearsal.yaml"
    override.write_text(yaml.safe_dump(REHEARSAL))
    cmd = [str(Path(sys.executable).parent / "mmspec"), "fetch", str(SAGE), str(override), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


def _run(tmp_path: Path, env: dict, *extra: str):
    override = tmp_path / "rehearsal.yaml"
    override.write_text(yaml.safe_dump(REHEARSAL))
    cmd = snakemake_cmd(tmp_path / "run", SAGE, str(override), *extra)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)


def test_fetch_then_the_rehearsal_runs_offline_to_its_report(repos, tmp_path):
    home = tmp_path / "hf"
    with Hub(repos) as hub:
        online = _env(home, HF_ENDPOINT=hub.url)
        listed = _fetch(tmp_path, online, "--list")
        assert listed.returncode == 0, listed.stderr[-3000:]
        assert hub.requests == ["README.md"]  # the card says which files: nothing else read
        # the three repositories, their files and bytes, and the config keys naming them
        draft_files = [p for p in repos[(MODEL, DRAFT)].iterdir() if p.suffix == ".safetensors"]
        assert any(
            f"model {DRAFT}:" in line and "[pairs.qwen25vl_72b_7b.draft]" in line
            for line in listed.stdout.splitlines()
        ), listed.stdout
        assert f"dataset {TEXTVQA}: 3 files" in listed.stdout  # card + the config's two splits
        assert "to fetch" in listed.stdout
        assert not (home / "hub" / "models--Qwen--Qwen2.5-VL-7B-Instruct" / "snapshots").exists()

        fetched = _fetch(tmp_path, online)
        assert fetched.returncode == 0, fetched.stderr[-3000:]
        got = set(hub.requests)
        assert "flax_model.msgpack" not in got and "pytorch_model.bin" not in got
        assert {p.name for p in draft_files} <= got and "other/unused.parquet" not in got
        again = _fetch(tmp_path, online, "--list")
        assert again.stdout.count(", cached") == 3, again.stdout

    offline = _env(home, HF_HUB_OFFLINE="1")
    run = _run(tmp_path, offline)
    assert run.returncode == 0, run.stderr[-3000:]
    cells = pq.read_table(tmp_path / "run" / "results" / "summary" / "cells.parquet").to_pylist()
    assert len(cells) == 2 and all(c["n_samples"] == 2 for c in cells)
    assert all(c["lossless_rate"] == 1.0 for c in cells if c["method"] != "ar")
    assert (tmp_path / "run" / "reports" / "index.html").exists()


def test_an_unfetched_cache_stops_the_run_before_any_job(repos, tmp_path):
    """Offline with a cache holding the draft and the dataset only, one of the draft's files
    removed: the run stops at its start, naming the target as absent and the draft as partial."""
    home = tmp_path / "hf"
    with Hub({k: v for k, v in repos.items() if k != (MODEL, TARGET)}) as hub:
        env = _env(home, HF_ENDPOINT=hub.url)
        for repo in (HubRepo(MODEL, DRAFT), HubRepo(DATASET, TEXTVQA)):
            subprocess.run(
                [sys.executable, "-c", _FETCH_ONE, repo.kind, repo.repo_id],
                env=env,
                check=True,
                cwd=ROOT,
            )
    snapshots = home / "hub" / "models--Qwen--Qwen2.5-VL-7B-Instruct" / "snapshots"
    snapshot = next(snapshots.iterdir())
    (snapshot / "tokenizer.json").unlink()
    run = _run(tmp_path, _env(home, HF_HUB_OFFLINE="1"))
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"model {TARGET} (pairs.{PAIR}.target): not in the Hugging Face cache" in output
    assert f"model {DRAFT} (pairs.{PAIR}.draft): The cached snapshot" in output
    assert "1 file(s) are missing (tokenizer.json)" in output
    assert TEXTVQA not in output.split("missing or incomplete:")[1]
    assert "mmspec fetch" in output
    assert not (tmp_path / "run" / "results").exists()  # no job ran


_FETCH_ONE = """
import sys
from mmspec.data.hf_spec import parse_entry
from mmspec.hub import cache as hub_cache
repo = hub_cache.HubRepo(sys.argv[1], sys.argv[2])
hub_cache.fetch(hub_cache.listing(repo))
"""


def test_a_dataset_config_the_card_does_not_declare_is_named():
    configs = "- {config_name: a, data_files: x/*}\n- {config_name: b, data_files: y/*}"
    card = f"---\nconfigs:\n{configs}\n---\n"
    assert hub_cache.dataset_patterns(card, "b", "o/d") == ["README.md", "y/*"]
    with pytest.raises(ValueError, match=r"declares the configs \['a', 'b'\], not 'c'"):
        hub_cache.dataset_patterns(card, "c", "o/d")
    assert hub_cache.dataset_patterns("# no card header", None, "o/d") is None  # whole repo
    dirs = "---\nconfigs:\n- config_name: default\n  data_dir: sub\n---\n"
    assert hub_cache.dataset_patterns(dirs, None, "o/d") == ["README.md", "sub/*"]


def test_jobs_run_offline_on_a_cluster_unless_told_otherwise():
    from mmspec.planning.hub_needs import jobs_offline

    assert jobs_offline(local_execution=False, environ={})
    assert not jobs_offline(local_execution=True, environ={})
    assert not jobs_offline(local_execution=False, environ={"HF_HUB_OFFLINE": "0"})
    assert jobs_offline(local_execution=True, environ={"HF_HUB_OFFLINE": "1"})


def test_fetch_on_an_offline_host_lists_what_the_cache_holds_and_fetches_nothing(tmp_path):
    offline = _env(tmp_path / "hf", HF_HUB_OFFLINE="1")
    listed = _fetch(tmp_path, offline, "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "hub repositories: 3 (HF_HUB_OFFLINE is set" in listed.stdout
    for name in (TARGET, DRAFT, TEXTVQA):
        assert f"{name}: not in the Hugging Face cache" in listed.stdout
    fetched = _fetch(tmp_path, offline)
    assert fetched.returncode != 0
    assert "HF_HUB_OFFLINE=0 mmspec fetch" in fetched.stderr


def test_an_unreachable_hub_is_named_with_the_repository(tmp_path):
    unreachable = _env(tmp_path / "hf", HF_ENDPOINT="http://127.0.0.1:9")  # discard port
    listed = _fetch(tmp_path, unreachable, "--list")
    assert listed.returncode != 0
    assert "could not list it at http://127.0.0.1:9" in listed.stderr
    assert f"model {TARGET} (pairs.{PAIR}.target)" in listed.stderr


def test_a_dataset_folder_spelt_as_a_path_must_exist_before_any_job(tmp_path):
    """As a local model folder must: `./data/signs` missing stops validation, naming it."""
    sweep = {
        "datasets": {
            "signs": {
                "source": "hf",
                "id": "./data/signs",
                "split": "train",
                "columns": {"question": "q", "answer": "a"},
                "metric": "exact_match",
            }
        },
        "sweep_extra": {
            "signs": {"datasets": ["signs"], "pairs": ["toy_vdraft"], "methods": ["ar"]}
        },
    }
    config = tmp_path / "signs.yaml"
    config.write_text(yaml.safe_dump(sweep))
    out = subprocess.run(["mmspec", "cells", str(config)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert "datasets.signs: local dataset folder './data/signs' does not exist" in out.stderr
