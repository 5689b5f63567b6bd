"""Shared fixtures: tiny random-initialised toy models (no training, no download), and one
end-to-end workflow run of the tiny config shared by the tests that read its outputs."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from report_pages import report  # noqa: E402, F401 (the page the report tests share)


def pytest_collection_finish(session):
    """Start the run through a real Slurm in the background when its test is collected: it
    mostly waits on Slurm, so the other tests run meanwhile (tests/test_slurm.py). Under
    pytest-xdist every worker collects every test, and only the one that runs the file may
    start the one Slurm of the machine: its fixture starts it there."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.nodeid.startswith("tests/test_slurm.py::") for item in session.items):
        import test_slurm

        test_slurm.start(session.config._tmp_path_factory.mktemp("slurm"))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Under pytest-xdist, test_slurm.py first (after every other hook: pytest-randomly's order;
    the files are handed out in this order, --no-loadscope-reorder): its run mostly waits on
    Slurm, so it starts before the other files and overlaps them rather than ending the run
    alone. A run in one process starts it at collection instead."""
    result = yield
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: not item.nodeid.startswith("tests/test_slurm.py::"))
    return result


def pytest_sessionfinish(session):
    import sys

    if "test_slurm" in sys.modules:
        sys.modules["test_slurm"].stop()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A workdir where the workflow ran the tiny config (tests/configs/tiny.yaml) end to end."""
    import subprocess

    from workflow_cli import ROOT, snakemake_cmd

    workdir = tmp_path_factory.mktemp("tiny")
    cmd = snakemake_cmd(workdir, ROOT / "tests" / "configs" / "tiny.yaml")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return workdir


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """family -> (target, draft) folders of tiny random models (the draft: one layer), saved once
    for every test that loads real families from disk (tests never write into them)."""
    from mmspec.toy import tiny

    root = tmp_path_factory.mktemp("families")
    return {
        family: (
            tiny.save(family, root / family, seed=0),
            tiny.save(family, root / f"{family}_draft", layers=1, seed=1),
        )
        for family in ("llava", "qwen2_5_vl")
    }


@pytest.fixture(scope="session")
def tiny_cell(tmp_path_factory):
    """The inputs of a generate job, made once: (folder, target, draft), the folder holding a
    prepared toy_diff dataset of 7 samples (prepared.parquet) and the visual caches of a tiny
    Qwen2.5-VL target and its one-layer draft (target.parquet, draft.parquet)."""
    from mmspec.stages import cache_visual, prepare
    from mmspec.toy import tiny

    root = tmp_path_factory.mktemp("cell")
    target = tiny.save("qwen2_5_vl", root / "target", seed=0)
    draft = tiny.save("qwen2_5_vl", root / "draft", layers=1, seed=1)
    prepare.run("toy_diff", {"source": "toy", "samples": 7}, str(root / "prepared.parquet"), 0)
    for path, name in ((target, "target"), (draft, "draft")):
        cache_visual.run(
            str(path), str(root / "prepared.parquet"), str(root / f"{name}.parquet"), "float32", 1
        )
    return root, target, draft


TINY_IMAGEGEN = dict(
    hidden=32, layers=1, heads=2, steps=60, batch_size=8, lr=3e-3, codes=32, patch=4,
    cfg_dropout=0.25, vq_images=60,
)  # fmt: skip


@pytest.fixture(scope="session")
def imagegen_dirs(tmp_path_factory):
    """(target, draft) folders of tiny toy image generators (trained a few seconds each, the
    draft with another seed and half the steps), saved once for every test that reads them."""
    from mmspec.toy import imagegen as toy_imagegen
    from mmspec.toy.recipe import ToyRecipe

    root = tmp_path_factory.mktemp("imagegen")
    for name, steps, seed in (("target", 60, 0), ("draft", 30, 1)):
        recipe = ToyRecipe.parse({**TINY_IMAGEGEN, "steps": steps}, kind="image_generator")
        toy_imagegen.train(recipe, root / name, seed=seed)
    return root / "target", root / "draft"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Offline mode, a private datasets cache, and any socket connection fails the test."""
    import socket

    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # datasets and huggingface_hub read the variables at import: set their flags as well
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")

    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)


@pytest.fixture(scope="session")
def processor():
    from mmspec.toy import processor as toy_processor

    return toy_processor.build_processor()


def _model(processor, hidden, layers, seed, logit_scale=1.0):
    import torch

    from mmspec.toy import training as toy_training
    from mmspec.toy.recipe import ToyRecipe

    spec = {"hidden": hidden, "layers": layers, "heads": 2, "vision_hidden": 64, "steps": 0}
    model = toy_training.build_model(ToyRecipe.parse(spec), processor.tokenizer, seed).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # peakier distributions make tests sharper
    return model


@pytest.fixture(scope="session")
def target_model(processor):
    return _model(processor, 64, 2, seed=1, logit_scale=8.0)


@pytest.fixture(scope="session")
def draft_model(processor):
    return _model(processor, 32, 1, seed=2, logit_scale=8.0)


@pytest.fixture(scope="session")
def near_draft_model(target_model):
    """The target with 10% noise on every weight: a draft that agrees with the target on about
    one drafted token in five (`draft_model`, another random model, agrees on none), so
    lossless tests exercise acceptance and rejection both."""
    import copy

    import torch

    near = copy.deepcopy(target_model)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in near.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1 * p.std().clamp_min(1e-3))
    return near
