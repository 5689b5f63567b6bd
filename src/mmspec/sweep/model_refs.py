"""Model references of a sweep, whatever their source (`models.source`: a hub id, a local
folder, `toy:<name>`): their one spelling, the checks made before any job runs (a reference its
source can load, a supported family, a shared tokenizer, a device map accelerate takes) and what
a reference is (its kind, its layers, its codebook).
"""

from __future__ import annotations

import json
import re

from mmspec.models import families
from mmspec.models import source as model_source
from mmspec.schema import ConfigError

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


def normalize_model_ref(ref: str) -> str:
    """A model reference in one spelling (local paths: "./models/tgt" and "models/tgt/" ->
    "models/tgt", "~" expanded; hub ids and toy models unchanged)."""
    return model_source.of(ref).normalize(ref)


def checked_model_ref(config: dict, key: str, ref: str, what: str) -> str:
    """`ref` (config key `key`, `what` it is for) in its one spelling, once its source has
    checked that a job could load it: a local folder exists, a toy model has a recipe. Hub ids
    need not be cached (the job downloads them)."""
    model_source.of(ref).check(key, ref, what, config)
    return normalize_model_ref(ref)


def check_model_files(name: str, pair: dict) -> None:
    """Models whose files are here (local folders, the HF cache): a supported family, and a
    draft tokenizer equal to the target's; checked before any job is submitted."""
    vocabularies = {}
    for role in ("target", "draft"):
        ref = pair.get(role)
        if ref is None:
            continue
        source = model_source.of(ref)
        folder = None if source.workflow_output(ref) else source.folder(ref)
        if folder is None:
            continue  # built by the workflow, or downloaded by the job
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


def model_kind(config: dict, ref: str) -> str | None:
    """The kind of model a reference names (`ModelSource.kind`): a toy recipe's kind; for a real
    model whose files are here, "image_generator" if it generates images (Janus), else None (as
    for one not yet downloaded)."""
    return model_source.of(ref).kind(ref, config)


def language_layers(config: dict, ref: str) -> int | None:
    """The decoder layers of a model's language model (None: unknown before its files are at
    hand)."""
    return model_source.of(ref).language_layers(ref, config)


def codebook(config: dict, ref: str) -> dict | None:
    """What an image generator's codebook is fitted from, when known before any job (a toy
    recipe's codes, patch and images); None otherwise."""
    return model_source.of(ref).codebook(ref, config)


def workflow_output(ref: str) -> str | None:
    """The folder a rule of the workflow writes the model to (a toy model's), or None."""
    return model_source.of(ref).workflow_output(ref)
