"""Model references of a sweep: toy recipes ("toy:<name>"), hub ids and local folders, their
one spelling, the checks made before any job runs (a local path exists, a supported family, a
shared tokenizer, a device map accelerate takes) and what a reference is (its kind, its layers).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

from mmspec import schema as config_schema
from mmspec.models import families
from mmspec.schema import ConfigError

TOY_PREFIX = "toy:"


DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def check_device_map(key: str, value) -> None:
    """A device_map as accelerate takes it: a placement strategy, or module name -> device.
    ("disk" offload is left out: it needs an offload folder and is too slow to time.)"""
    expected = (
        f"expected one of {', '.join(DEVICE_MAP_STRATEGIES)}, or a mapping of module name to "
        'device (a GPU index, "cuda:N" or "cpu")'
    )
    if isinstance(value, str):
        if value not in DEVICE_MAP_STRATEGIES:
            raise ConfigError(f"config key {key}: {value!r} is no placement strategy; {expected}")
        return
    if not value:
        raise ConfigError(f"config key {key}: an empty mapping; {expected}")
    for module, device in value.items():
        index = isinstance(device, int) and not isinstance(device, bool) and device >= 0
        if not (index or (isinstance(device, str) and _DEVICE_RE.match(device))):
            raise ConfigError(f"config key {key}.{module}: device {device!r}; {expected}")


# A Hugging Face hub id: owner/name of letters, digits, '_', '.', '-', neither part starting or
# ending with '.' or '-' (the hub also forbids '--' and '..' inside, checked apart).
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"


HUB_ID_RE = re.compile(rf"{_HUB_PART}/{_HUB_PART}")


LOCAL_PREFIXES = ("./", "../", "/", "~")


def is_hub_id(ref: str) -> bool:
    """Whether `ref` could name a hub repository (owner/name), not only a local path."""
    return bool(HUB_ID_RE.fullmatch(ref)) and "--" not in ref and ".." not in ref


def normalize_model_ref(ref: str) -> str:
    """A model reference in one spelling: local paths normalised ("./models/tgt" and
    "models/tgt/" -> "models/tgt", "~" expanded); hub ids and toy models unchanged."""
    if ref.startswith(TOY_PREFIX):
        return ref
    return os.path.normpath(os.path.expanduser(ref))  # an owner/name id is a fixed point


def check_local_model(key: str, ref: str, what: str) -> None:
    """A reference that can only be a local path must be a directory here: found at parse time,
    not when the job that loads it fails. Hub ids need not be cached (the job downloads them)."""
    if ref.startswith(TOY_PREFIX):
        return
    if not ref:
        raise ConfigError(f"config key {key}: {what}: an empty model reference")
    path = Path(os.path.expanduser(ref))
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"config key {key}: {what}: {ref!r} is a file, not a model directory")
    if ref.startswith(LOCAL_PREFIXES) or not is_hub_id(ref):
        raise ConfigError(
            f"config key {key}: {what}: local model path {ref!r} does not exist (relative to "
            f"{os.getcwd()}), and it is no hub id of the form owner/name"
        )


def check_model_files(name: str, pair: dict) -> None:
    """Models whose files are here (local folders, the HF cache): a supported family, and a
    draft tokenizer equal to the target's; checked before any job is submitted."""
    vocabularies = {}
    for role in ("target", "draft"):
        ref = pair.get(role)
        folder = None if ref is None or ref.startswith(TOY_PREFIX) else families.local_files(ref)
        if folder is None:
            continue  # trained by the workflow, or downloaded by the job
        model_config = json.loads((folder / "config.json").read_text())
        if families.generates_images(model_config):
            continue  # read by models.image_generation, not a VLM family
        try:
            families.check_config_dict(model_config, ref)
        except ValueError as e:
            raise ConfigError(f"config key pairs.{name}.{role}: {e}") from None
        vocabularies[role] = families.tokenizer_vocabulary(folder)
    target, draft = vocabularies.get("target"), vocabularies.get("draft")
    if target is not None and draft is not None and target != draft:
        raise ConfigError(
            f"config key pairs.{name}.draft: the draft's tokenizer ({len(draft)} tokens) differs "
            f"from the target's ({len(target)} tokens); speculative decoding needs a shared "
            "tokenizer"
        )


def _toy_kind_keys() -> dict[str, set[str]]:
    """Every key one kind of toy recipe alone reads (config/schema.yaml: the `then` of its kind's
    part of a recipe's `allOf`); the other keys are common to all kinds."""
    recipe = config_schema.section("toy", "models")["additionalProperties"]
    keys = {}
    for part in recipe["allOf"]:
        kind = part["if"]["properties"]["kind"]["const"]
        keys[kind] = set(part["then"]["properties"])
    return keys


TOY_KIND_KEYS = _toy_kind_keys()


# The codebook of an image generator is fitted from these: a pair's two must agree on them.
CODEBOOK_KEYS = ("codes", "patch", "vq_images")


def model_kind(config: dict, ref: str) -> str | None:
    """The kind of model a reference names: a toy recipe's kind; for a real model whose files
    are here, "image_generator" if it generates images (Janus), else None (as for one not yet
    downloaded)."""
    if not ref.startswith(TOY_PREFIX):
        return "image_generator" if _local_image_generator(ref) else None
    return config["toy"]["models"][ref[len(TOY_PREFIX) :]].get("kind", "captioner")


@functools.cache
def _local_image_generator(ref: str) -> bool:
    """Whether a real model whose files are here generates images; read once per reference,
    not once per cell."""
    folder = families.local_files(ref)
    return folder is not None and families.generates_images(
        json.loads((folder / "config.json").read_text())
    )


def language_layers(config: dict, ref: str) -> int | None:
    """The decoder layers of a toy recipe or a local model's language model (None: unknown
    before its files are at hand)."""
    if ref.startswith(TOY_PREFIX):
        return config["toy"]["models"][ref[len(TOY_PREFIX) :]].get("layers")
    config_file = Path(ref).expanduser() / "config.json"
    if not config_file.is_file():
        return None
    model = json.loads(config_file.read_text())
    return (model.get("text_config") or model).get("num_hidden_layers")
