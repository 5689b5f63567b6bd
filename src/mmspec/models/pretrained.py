"""The model sources of `save_pretrained` files: a local folder, or a Hugging Face hub id (its
newest snapshot in the HF cache when downloaded, else fetched by the job that loads it)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from mmspec.hub.refs import is_local
from mmspec.models import families, footprint
from mmspec.models.source import IMAGE_GENERATOR, ModelSource, register
from mmspec.schema import ConfigError


class PretrainedFiles(ModelSource):
    """What a local folder and a hub id share: files `from_pretrained` reads as they are."""

    def kind(self, ref: str, config: dict) -> str | None:
        return IMAGE_GENERATOR if _generates_images(ref) else None

    def language_layers(self, ref: str, config: dict) -> int | None:
        """A local folder's (a hub id's are checked once its job has loaded it)."""
        config_file = Path(ref).expanduser() / "config.json"
        if not config_file.is_file():
            return None
        model = json.loads(config_file.read_text())
        return (model.get("text_config") or model).get("num_hidden_layers")

    def folder(self, ref: str) -> Path | None:
        return families.local_files(ref)

    def parameters(self, ref: str, recipes: dict | None) -> tuple[int, str]:
        return footprint.name_parameters(ref), "name"


@functools.cache
def _generates_images(ref: str) -> bool:
    """Whether a model whose files are here generates images (Janus); read once per
    reference, not once per cell."""
    folder = families.local_files(ref)
    return folder is not None and families.generates_images(
        json.loads((folder / "config.json").read_text())
    )


@register
class LocalFolders(PretrainedFiles):
    name = "local"

    def claims(self, ref: str) -> bool:
        return is_local(ref)

    def normalize(self, ref: str) -> str:
        """One spelling of a path: "./models/tgt" and "models/tgt/" -> "models/tgt", "~"
        expanded."""
        return os.path.normpath(os.path.expanduser(ref))

    def check(self, key: str, ref: str, what: str, config: dict) -> None:
        """The folder must be here: found at parse time, not when the job that loads it fails."""
        if not ref:
            raise ConfigError(f"config key {key}: {what}: an empty model reference")
        path = Path(os.path.expanduser(ref))
        if path.is_dir():
            return
        if path.exists():
            raise ConfigError(f"config key {key}: {what}: {ref!r} is a file, not a model directory")
        raise ConfigError(
            f"config key {key}: {what}: local model path {ref!r} does not exist (relative to "
            f"{os.getcwd()}), and it is no hub id of the form owner/name"
        )


@register
class HubIds(PretrainedFiles):
    """A hub id need not be downloaded before the run: the job that loads it downloads it."""

    name = "hub"

    def claims(self, ref: str) -> bool:
        return not is_local(ref)
