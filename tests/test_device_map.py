"""A target spread by a device_map (pairs.<name>.target_device_map) decodes as a whole one.

This machine has no GPU, so no test here splits a model over devices. What CPU can check:
the option is validated with a clear error; the generate stage hands it to `from_pretrained`
(accelerate's placement path instead of `.to(device)`) and puts the draft where the target's
embeddings are; and a model carrying accelerate's per-module hooks (what a multi-GPU split
installs, here forced onto one device) goes through prompt building, the visual cache and the
decoder's own KV cache with outputs identical to the plain model's, SD == AR.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
import transformers

from mmspec.decoding.decoder import language_parts
from mmspec.methods.registry import resolve
from mmspec.models import footprint, loading
from mmspec.stages import cache_visual, generate, prepare
from mmspec.sweep import config as mmconfig

FAMILIES = ["llava", "qwen2_5_vl"]
METHODS = [("ar", {}), ("sd_chain", {"gamma": 3}), ("sd_tree", {}), ("eagle2_tree", {})]


def _config(device_map) -> dict:
    pair = {"target": "toy:target", "draft": "toy:draft", "target_device_map": device_map}
    return {
        "toy": {
            "models": {
                "target": {"hidden": 32, "layers": 1, "steps": 0},
                "draft": {"hidden": 32, "layers": 1, "steps": 0},
            }
        },
        "datasets": {"toy_caption": {"source": "toy"}},
        "pairs": {"p": pair},
        "methods": {"ar": {}},
    }


@pytest.mark.parametrize(
    "device_map",
    ["auto", "balanced_low_0", {"": "cpu"}, {"model.language_model": 0, "lm_head": "cuda:1"}],
)
def test_device_maps_accelerate_takes_are_valid(device_map):
    pair = mmconfig.validate(_config(device_map))["pairs"]["p"]
    assert pair["target_device_map"] == device_map


@pytest.mark.parametrize(
    ("device_map", "message"),
    [
        ("gpu", "config key pairs.p.target_device_map: 'gpu' is no placement strategy"),
        ({}, "config key pairs.p.target_device_map: an empty mapping"),
        ({"lm_head": "disk"}, "config key pairs.p.target_device_map.lm_head: device 'disk'"),
        ({"lm_head": -1}, "config key pairs.p.target_device_map.lm_head: device -1"),
        (["auto"], "config key pairs.p.target_device_map: ['auto'] is not of type"),
    ],
)
def test_bad_device_maps_name_the_key_and_what_is_expected(device_map, message):
    with pytest.raises(mmconfig.ConfigError) as error:
        mmconfig.validate(_config(device_map))
    assert str(error.value).startswith(message)
    if not isinstance(device_map, list):
        assert "a GPU index" in str(error.value)


def test_a_pair_without_device_map_keeps_its_params():
    """No default is filled in, so existing generate jobs' params (and outputs) stay valid."""
    config = _config("auto")
    del config["pairs"]["p"]["target_device_map"]
    assert "target_device_map" not in mmconfig.validate(config)["pairs"]["p"]


def _hooked(model):
    """`model` with accelerate's hooks on every module a multi-GPU device_map places
    separately (vision tower, projector, embeddings, each decoder layer, norm, lm_head), all on
    the CPU: the code path of a split model, minus the devices."""
    from accelerate import dispatch_model

    stack, _, _ = language_parts(model)
    placement = {}
    for name, child in model.model.named_children():
        if child is not stack:
            placement[f"model.{name}"] = "cpu"
            continue
        for sub, module in stack.named_children():
            if sub == "layers":
                placement.update({f"model.{name}.layers.{i}": "cpu" for i in range(len(module))})
            else:
                placement[f"model.{name}.{sub}"] = "cpu"
    placement["lm_head"] = "cpu"
    skip = model._skip_keys_device_placement
    return dispatch_model(model, placement, force_hooks=True, skip_keys=skip)


def _run_cells(target_dir, draft_dir, device_map) -> dict:
    pair = {"target": str(target_dir), "draft": str(draft_dir), "dtype": "float32"}
    if device_map is not None:
        pair["target_device_map"] = device_map
    outputs = {}
    for k, (method, hparams) in enumerate(METHODS):
        spec = resolve(method, hparams).to_dict()
        cell = {"dataset": "toy_diff", "pair": "p", "method": method, "hp": json.dumps(hparams)}
        params = {
            "cell": {**cell, "seed": 0, "spec": spec},
            "pair": pair,
            "generation": {"max_new_tokens": 16},
            "timing": {"warmup_samples": 0, "threads": 1},
        }
        out = f"{device_map}-{k}.parquet".replace(" ", "")
        generate.run(params, "prepared.parquet", "target.parquet", "draft.parquet", out)
        outputs[method] = [r["output_ids"] for r in pq.read_table(out).to_pylist()]
    return outputs


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_with_a_device_map_decodes_as_without(family, model_dirs, tmp_path, monkeypatch):
    """target_device_map reaches from_pretrained ("auto" and {"": "cpu"} place everything on
    the CPU here), the draft loads onto the target's embedding device, and a target with
    accelerate's hooks gives the same tokens as the plain one: SD == AR in every case."""
    monkeypatch.chdir(tmp_path)
    target_dir, draft_dir = model_dirs[family]
    prepare.run("toy_diff", {"source": "toy", "samples": 3}, "prepared.parquet", toy_seed=0)
    for name, path in (("target", target_dir), ("draft", draft_dir)):
        cache_visual.run(str(path), "prepared.parquet", f"{name}.parquet", "float32", 1)
    plain = _run_cells(target_dir, draft_dir, None)

    seen = []  # (device_map given to from_pretrained, hooks on the decoder layers)
    real_from_pretrained = transformers.AutoModelForImageTextToText.from_pretrained
    real_load = loading.load_model

    def from_pretrained(*args, **kwargs):
        seen.append(kwargs.get("device_map"))
        return real_from_pretrained(*args, **kwargs)

    def load_model(ref, device, dtype="float32", check_family=True, device_map=None):
        if device_map == "hooks":  # test only: force accelerate's hooks onto one device
            return _hooked(real_load(ref, device, dtype, check_family, {"": "cpu"}))
        if device_map is None:
            assert device == torch.device("cpu")  # the draft: the target's embedding device
        return real_load(ref, device, dtype, check_family, device_map)

    monkeypatch.setattr(
        transformers.AutoModelForImageTextToText, "from_pretrained", from_pretrained
    )
    monkeypatch.setattr(loading, "load_model", load_model)
    for device_map in ("auto", {"": "cpu"}, "hooks"):
        del seen[:]
        outputs = _run_cells(target_dir, draft_dir, device_map)
        assert outputs == plain, device_map
        for method in outputs:
            assert outputs[method] == outputs["ar"], (device_map, method)
        expected = {"": "cpu"} if device_map == "hooks" else device_map
        # per generate job: the target with the map, then the draft (methods with a draft) without
        assert seen == [expected] + [expected, None] * (len(METHODS) - 1)
    stack, _, _ = language_parts(_hooked(real_load(str(target_dir), torch.device("cpu"))))
    assert hasattr(stack.layers[0], "_hf_hook")


def test_cache_visual_splits_only_a_model_too_big_for_its_gpu(monkeypatch, model_dirs):
    """cache_visual loads one model on whatever GPUs its job has: whole when it fits the
    first GPU's free memory, device_map="auto" when not; never on a CPU."""
    ref = str(model_dirs["llava"][0])
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert loading.fitting_device_map(ref, "float32", cpu) is None
    size = footprint.footprint(ref, "float32").bytes
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10 * size, 80 * 2**30))
    assert loading.fitting_device_map(ref, "float32", gpu) is None
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (size, 80 * 2**30))
    assert loading.fitting_device_map(ref, "float32", gpu) == "auto"
    assert loading.fitting_device_map(ref, "bfloat16", gpu) is None  # half the bytes fit
