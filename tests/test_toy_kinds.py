"""Toy recipes of every kind: captioners, image generators and the image-metric networks; each
reads only its own keys, pairs name generators that share a codebook, and `mmspec toy_model`
trains each kind into a folder that loads."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from base_config import base_config

from mmspec.sweep import cells as mmcells
from mmspec.sweep import config as mmconfig
from mmspec.sweep import config_checks

GENERATOR = {"kind": "image_generator", "hidden": 16, "layers": 1, "steps": 4, "codes": 16,
             "vq_images": 30, "batch_size": 4}  # fmt: skip
SWEEP = {"datasets": "all", "pairs": ["toy"], "methods": "all"}
BASE = base_config(methods={"ar": {}, "sd": {}}, sweep=[SWEEP])
BASE["pairs"]["image"] = {"target": "toy:image_target", "draft": "toy:image_draft"}
BASE["toy"]["models"] |= {
    "image_target": GENERATOR,
    "image_draft": {**GENERATOR, "hidden": 8},
    "features": {"kind": "fid_features", "hidden": 16, "layers": 1, "steps": 2},
    "clip": {"kind": "clip", "hidden": 16, "layers": 1, "steps": 2},
}


def _with(path: list, value, base: dict = BASE):
    cfg = copy.deepcopy(base)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return cfg


def test_every_kind_validates_with_its_own_defaults():
    cfg = mmconfig.validate(copy.deepcopy(BASE))
    models = cfg["toy"]["models"]
    assert "kind" not in models["target"] and models["target"]["vision_hidden"] == 64
    assert models["image_target"]["cfg_dropout"] == 0.1 and "vision_hidden" not in models["clip"]
    assert models["features"]["patch"] == 4


def test_a_hand_written_recipe_trains_with_the_schemas_defaults_of_its_kind():
    """The trainers complete a recipe from config/schema.yaml (toy/recipe.py): what a test or an
    analysis leaves out takes the default a config would, and a bad key is named."""
    from mmspec.schema import ConfigError
    from mmspec.toy.recipe import complete

    cfg = mmconfig.validate(copy.deepcopy(BASE))
    for name, spec in cfg["toy"]["models"].items():
        assert complete(spec, name) == spec  # a validated recipe is complete already
    captioner = complete({"hidden": 16, "layers": 1, "steps": 2})
    assert (captioner["text_scenarios"], captioner["grounding_steps"]) == ([], 0)
    assert (captioner["image_dropout"], captioner["vision_hidden"]) == (0.0, 64)
    assert "visual_alignment" not in captioner  # absent: next-token loss alone
    assert complete({"kind": "image_generator", "hidden": 16, "layers": 1, "steps": 2})["codes"]
    with pytest.raises(ConfigError, match=r"toy.models.t: `grounding_steps`: -1 is less than"):
        complete({"hidden": 16, "layers": 1, "steps": 2, "grounding_steps": -1}, "t")


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            ["toy", "models", "clip", "scenarios"],
            ["toy_caption"],
            r"clip.scenarios: not read by a 'clip'",
        ),
        (["toy", "models", "target", "codes"], 64, r"target.codes: not read by a 'captioner'"),
        (
            ["toy", "models", "image_draft", "codes"],
            32,
            "must share a VQ codebook, but their codes",
        ),
        (["pairs", "image", "draft"], "toy:draft", "an image generator pairs only with another"),
        (["pairs", "toy", "draft"], "toy:clip", "is a 'clip' network"),
        (["toy", "models", "clip", "kind"], "vae", "kind"),
        (["sweep"], [{**SWEEP, "pairs": ["image"]}], "generates images"),
    ],
)
def test_bad_kinds_and_pairs_are_named(path, value, message):
    with pytest.raises(mmconfig.ConfigError, match=message):
        mmconfig.validate(_with(path, value))


@pytest.mark.parametrize("name", ["image_target", "features", "clip"])
def test_toy_model_stage_trains_each_kind(tmp_path, name):
    spec = mmconfig.validate(copy.deepcopy(BASE))["toy"]["models"][name]
    out = tmp_path / name
    args = ["toy_model", "--name", name, "--spec", json.dumps(spec), "--seed", "0"]
    run = subprocess.run(
        [sys.executable, "-m", "mmspec.cli", *args, "--threads", "1", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((out / "training.json").read_text())
    assert record["spec"]["kind"] == spec["kind"] and (out / "config.json").exists()
    if name == "image_target":
        from mmspec.toy import imagegen as toy_imagegen

        vectors, offset = toy_imagegen.codebook_of(out)
        assert vectors.shape[0] == 16 and offset > 0


def test_lantern_needs_a_codebook_target_and_k_within_it():
    lantern = {"method": "sd_chain", "acceptance": "lantern", "lantern_k": 8}
    cfg = _with(["methods", "lantern"], lantern)
    with pytest.raises(
        mmconfig.ConfigError,
        match=r"methods.lantern: .* 'toy:target' is a "
        r"'captioner' with none",
    ):
        mmconfig.validate(cfg)
    cfg["sweep"] = [{**SWEEP, "pairs": ["image"], "methods": ["lantern"]}]
    cfg["methods"]["lantern"]["lantern_k"] = 16  # the generators have 16 codes
    with pytest.raises(mmconfig.ConfigError, match="lantern_k 16 must be below the 16 codes"):
        mmconfig.validate(cfg)


IMAGE_SWEEP = {
    **BASE,
    "datasets": {**BASE["datasets"], "toy_imagegen": {"source": "toy", "samples": 4}},
    "image_metrics": {"fid_features": "toy:features", "clip": "toy:clip"},
    "sweep": [
        {**SWEEP, "datasets": ["toy_caption"]},
        {"datasets": ["toy_imagegen"], "pairs": ["image"], "methods": "all"},
    ],
}


def test_an_image_sweep_validates_and_says_its_task():
    cfg = mmconfig.validate(copy.deepcopy(IMAGE_SWEEP))
    assert config_checks.dataset_task(cfg, "toy_imagegen") == "image_generation"
    assert config_checks.dataset_task(cfg, "toy_caption") == "answer"
    assert cfg["generation"]["cfg"] == 3.0
    assert {c.dataset for c in mmcells.cells(cfg) if c.pair == "image"} == {"toy_imagegen"}


@pytest.mark.parametrize(
    "path, value, message",
    [
        (["sweep", 1, "pairs"], ["toy"], r"dataset 'toy_imagegen' asks for images, .* 'captioner'"),
        (["image_metrics"], None, "names no FID feature network or CLIP model"),
        (["image_metrics", "clip"], "toy:features", r"image_metrics.clip: .* not a 'clip' one"),
        (["image_metrics", "fid_features"], "./nets/missing", "local model path .* does not exist"),
        (["image_metrics", "clip"], "toy:nothing", "names no model under toy.models"),
        (["generation", "cfg"], -1.0, "cfg"),
    ],
)
def test_bad_image_sweeps_fail_before_any_job(path, value, message):
    if path[0] == "generation":
        cfg = {**copy.deepcopy(IMAGE_SWEEP), "generation": {"cfg": value}}
    else:
        cfg = _with(path, value, IMAGE_SWEEP)
    with pytest.raises(mmconfig.ConfigError, match=message):
        mmconfig.validate(cfg)
