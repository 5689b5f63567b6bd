"""Load models and processors by any model reference (a hub id, a local directory, `toy:<name>`).

Every model is an ordinary `save_pretrained` folder or hub id, so every model goes through the
same `from_pretrained` call; only the reference-to-path step differs, by the reference's source
(`models.source`).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

from mmspec.models import source as model_source
from mmspec.storage import integrity

# A warm worker's (mmspec.workflow.worker) loaded models and processors: key -> (files' stamp,
# object). None outside a worker, where every job loads its own.
_kept: dict | None = None
_used: set = set()
_reused: list[str] = []  # what this job found kept ("model <path>"), for the worker's log line


def keep_loaded(on: bool) -> None:
    """Keep what loads for the next job of this process (a warm worker), until it loads
    something else (`release_unused`)."""
    global _kept
    _kept = {} if on else None
    _used.clear()


def release_unused(job_done: bool = True) -> None:
    """Drop what this job has not loaded (so far; all of the last job's once it is done)."""
    if _kept is None:
        return
    for key in set(_kept) - _used:
        del _kept[key]
    if job_done:
        _used.clear()
    _free()


def reused() -> list[str]:
    """What this job took from the kept models (and forget it, for the next job)."""
    taken = list(_reused)
    _reused.clear()
    return taken


def release_all() -> None:
    """Drop everything kept (a job of another stage comes)."""
    if _kept:
        _kept.clear()
        _free()


def _free() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _stamp(path: str) -> list:
    """A local folder's files with their sizes and times (a retrained model is reloaded); a hub
    id is its own stamp."""
    folder = Path(path)
    if not folder.is_dir():
        return [path]
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def _kept_or_load(kind: str, path: str, args: tuple, load):
    if _kept is None:
        return load()
    key = (kind, str(Path(path).resolve()) if Path(path).exists() else path, *args)
    stamp = _stamp(path)
    _used.add(key)
    if key in _kept and _kept[key][0] == stamp:
        _reused.append(f"{kind} {path}")
        return _kept[key][1]
    _kept.pop(key, None)
    release_unused(job_done=False)  # another pair's models leave the GPU before these load
    loaded = load()
    _kept[key] = (stamp, loaded)
    return loaded


def resolve_ref(ref: str) -> str:
    """The `from_pretrained` argument for a model reference; a model the workflow trained is
    checked against its manifest's checksums first (`integrity.verify_folder`)."""
    location = model_source.of(ref).location(ref)
    if os.path.isdir(location):
        integrity.verify_folder(location)
    return location


def load_model(
    ref: str,
    device: torch.device,
    dtype: str = "float32",
    check_family=True,
    device_map: str | dict | None = None,
):
    """A model in eval mode on `device`: multimodal if its config says so, else a causal LM.
    Multimodal models must be of a supported family (`families`) unless `check_family` is off
    (the captioner, which only captions).

    With a `device_map` ("auto", "balanced", ... or module name -> device) accelerate places
    the weights as they load, over several GPUs (`device` is then unused); its hooks move each
    module's inputs to that module's device, and `input_device` tells where inputs start."""
    path = resolve_ref(ref)
    return _kept_or_load(
        "model",
        path,
        (str(device), dtype, check_family, json.dumps(device_map)),
        lambda: _load_model(ref, path, device, dtype, check_family, device_map),
    )


def _load_model(ref, path, device, dtype, check_family, device_map):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    from mmspec.models import families

    folder = families.local_files(path)
    if check_family and folder is not None:  # before transformers reads the config
        families.check_config_dict(json.loads((folder / "config.json").read_text()), ref)
    config = AutoConfig.from_pretrained(path)
    multimodal = hasattr(config, "vision_config")
    if multimodal and check_family and folder is None:  # a hub id: checked once loaded
        families.check_config(config, ref)
    loader = AutoModelForImageTextToText if multimodal else AutoModelForCausalLM
    if device_map is not None:
        model = loader.from_pretrained(path, dtype=getattr(torch, dtype), device_map=device_map)
        return model.eval()
    model = loader.from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device).eval()


def input_device(model) -> torch.device:
    """Where a model's inputs go: its input embeddings' device (the first GPU of a model split
    by a device_map, whose vision tower sits there too); a draft shares it with its target."""
    return model.get_input_embeddings().weight.device


def fitting_device_map(ref: str, dtype: str, device: torch.device) -> str | None:
    """None when model `ref` fits on `device`, else "auto" (split over the GPUs, the rest on
    the CPU): for stages that load one model on whatever GPUs the job has (cache_visual)."""
    from mmspec.models import footprint

    if device.type != "cuda":
        return None
    size = footprint.footprint(ref, dtype).bytes
    free, _ = torch.cuda.mem_get_info(device)
    if size is None or size * footprint.WEIGHT_FACTOR <= free:
        return None
    print(
        f"{ref}: {size / 2**30:.1f} GiB of weights do not fit the {free / 2**30:.1f} GiB free "
        f"on {device}: device_map='auto'",
        file=sys.stderr,
    )
    return "auto"


def load_processor(ref: str):
    """The processor (tokenizer + image processor) of a model, or its tokenizer alone."""
    from transformers import AutoConfig, AutoTokenizer

    from mmspec.models import processors

    path = resolve_ref(ref)

    def load():
        if not hasattr(AutoConfig.from_pretrained(path), "vision_config"):
            return AutoTokenizer.from_pretrained(path)
        return processors.load(path)

    return _kept_or_load("processor", path, (), load)


@contextmanager
def about(ref: str):
    """Unexpected errors raised inside (not bad-input errors, which say where they come from)
    name the model they concern."""
    try:
        yield
    except (ValueError, KeyError, FileNotFoundError):
        raise
    except Exception as error:
        raise RuntimeError(f"{ref}: {type(error).__name__}: {error}") from error


def tokenizer_of(processor):
    return getattr(processor, "tokenizer", processor)


def image_token_of(processor) -> str:
    """The placeholder string for an image in prompts."""
    token = getattr(processor, "image_token", None) or getattr(
        tokenizer_of(processor), "image_token", None
    )
    return token or "<image>"
