"""Model sources: where a model reference's files come from (a hub id, a local folder,
`toy:<name>`, a plugin's scheme), each one class on this protocol, found as components are
(`decoding.catalog`).

A reference `<scheme>:<rest>` belongs to the source that declares that scheme; any other is the
first scheme-less source's that `claims` it (a local folder, else a hub id). A source declares
its references' one spelling (`normalize`), what is checked before any job (`check`, and
`check_config` for a config section of its own), what a reference is (`kind`,
`language_layers`, `codebook`), where its files are (`folder`, and the `from_pretrained`
argument `location`), the folder a workflow rule writes it to (`workflow_output`), a size
known without its files (`parameters`, for memory requests), its results' folder name
(`folder_name`) and the readers of folder formats transformers does not read (`readers`).

Built-in sources register when their modules are imported (`BUILT_IN_MODULES`: hub ids and
local folders in `models.pretrained`, the toy world's models in `toy.model_source`). A researcher's
own package adds sources through the entry point group `mmspec.model_sources`. Validation
imports no torch, and a source's module imports nothing loading needs: its readers are named
(`readers`), and only the code that loads such a model imports them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

from mmspec.plugins import import_closure
from mmspec.plugins.catalog import Catalog, CatalogError

GROUP = "mmspec.model_sources"
BUILT_IN_MODULES = ("mmspec.models.pretrained", "mmspec.toy.model_source")

# what a folder is read as (the names of the models' kinds), by the readers `readers` names:
# IMAGE_GENERATOR: `read(ref, path, device, dtype)` -> a `models.image_generation.ImageGenerator`;
# FID_FEATURES: `read(folder)` -> FID's feature module (`scoring.image_metrics`); each returns
# None for a folder that holds none of its format.
IMAGE_GENERATOR = "image_generator"
FID_FEATURES = "fid_features"


class ModelSource:
    """A kind of model reference. `config` is the validated sweep."""

    name: ClassVar[str] = ""  # its name (two sources may not share one)
    scheme: ClassVar[str | None] = None  # references "<scheme>:<rest>"; None: claimed by form
    # purpose -> the readers of this source's folder formats, each "module:function" (imported
    # only by the code that loads a model for that purpose), tried before transformers' own
    readers: ClassVar[dict[str, tuple[str, ...]]] = {}

    def claims(self, ref: str) -> bool:
        """Whether a reference without a known scheme is this source's."""
        return False

    def normalize(self, ref: str) -> str:
        """The reference's one spelling."""
        return ref

    def check(self, key: str, ref: str, what: str, config: dict) -> None:
        """Raise ConfigError (naming config key `key` and `what` the model is for) for a
        reference no job could load."""

    def check_config(self, config: dict) -> None:
        """Raise ConfigError for a bad config section of this source's own."""

    def kind(self, ref: str, config: dict) -> str | None:
        """What the model is (captioner, image_generator, fid_features, clip); None: unknown
        before its files are at hand, or a model that answers (a VLM, a language model)."""
        return None

    def language_layers(self, ref: str, config: dict) -> int | None:
        """Its language model's decoder layers, if known now (from its folder's config.json)."""
        folder = self.folder(ref)
        if folder is None:
            return None
        model = json.loads((folder / "config.json").read_text())
        return (model.get("text_config") or model).get("num_hidden_layers")

    def codebook(self, ref: str, config: dict) -> dict | None:
        """What an image generator's codebook is fitted from, if known before it is built (a
        pair's two must agree)."""
        return None

    def folder(self, ref: str) -> Path | None:
        """The folder holding its files now, if any."""
        return None

    def location(self, ref: str) -> str:
        """What `from_pretrained` loads it from."""
        return ref

    def workflow_output(self, ref: str) -> str | None:
        """The folder a rule of the workflow writes it to (jobs loading it wait for that rule);
        None: its files are not the workflow's."""
        return None

    def parameters(self, ref: str, recipes: dict | None) -> tuple[int, str]:
        """(parameter count, where it comes from) known without its files, or (0, ""); `recipes`:
        the config's models the workflow builds, by name."""
        return 0, ""

    def folder_name(self, ref: str) -> str | None:
        """Its folder name under results/ (None: the reference's text, slugged)."""
        return None


def _clash(source: type[ModelSource], known: type[ModelSource]) -> str | None:
    """Two sources may not share a scheme either."""
    if source.scheme and known.scheme == source.scheme:
        return (
            f"model source {source.name!r} (scheme {source.scheme!r}) clashes with "
            f"{known.__module__}.{known.__qualname__}"
        )
    return None


CATALOG = Catalog(
    noun="model source",
    base=ModelSource,
    base_home="models.source",
    group=GROUP,
    built_in_modules=BUILT_IN_MODULES,
    clash=_clash,
)
register = CATALOG.register
load = CATALOG.load


def sources() -> list[ModelSource]:
    """Every source, in the order they registered."""
    return [source() for source in CATALOG.of_section().values()]


def plugin_code(refs) -> str:
    """The code of the sources of the model references `refs` that plugins add
    (import_closure.foreign_code): part of the fingerprint of each job loading those models,
    so editing a source (its reader) reruns them."""
    return import_closure.foreign_code([type(of(ref)) for ref in refs])


def of(ref: str) -> ModelSource:
    """The source of a model reference."""
    scheme, colon, _ = ref.partition(":")
    found = sources()
    for source in found:
        if colon and source.scheme == scheme:
            return source
    for source in found:
        if source.scheme is None and source.claims(ref):
            return source
    raise CatalogError(f"no model source reads {ref!r}")


def readers(purpose: str) -> list[str]:
    """The readers ("module:function") the sources name for `purpose`, in their order."""
    return [name for source in sources() for name in source.readers.get(purpose, ())]
