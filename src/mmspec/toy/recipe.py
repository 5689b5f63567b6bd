"""A toy model's recipe (config `toy.models.<name>`), parsed once into a typed `ToyRecipe`:
checked against config/schema.yaml's toy model recipe and completed with its kind's defaults, so
the trainers read fields, and a recipe written by hand (a test's, an analysis's) trains as the
same recipe in a config would."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

from mmspec import schema

CAPTIONER = "captioner"  # the kind of a recipe that names none
# The codebook of an image generator is fitted from these: a pair's two must agree on them.
CODEBOOK_KEYS = ("codes", "patch", "vq_images")


@dataclass(frozen=True)
class ToyRecipe:
    """A completed toy recipe (config/schema.yaml: toy.models.*). A key another kind reads is
    left at its empty value here (None, 0, ())."""

    kind: str  # captioner, image_generator, fid_features or clip
    hidden: int  # width of the language model (of the ViT / CLIP for the image networks)
    layers: int
    steps: int  # training batches
    heads: int
    batch_size: int
    lr: float
    completed: dict = field(
        default_factory=dict, repr=False, compare=False
    )  # as completed (training.json's)
    # a captioner's
    vision_hidden: int | None = None
    scenarios: tuple[str, ...] = ()
    text_scenarios: tuple[str, ...] = ()
    grounding_steps: int = 0
    image_dropout: float = 0.0
    vdesc_style: str | None = None
    vdesc_colour_noise: float = 0.0
    vdesc_foreign_share: float = 0.0
    visual_alignment: float = 0.0
    alignment_null: bool = False
    # an image generator's (patch: also the FID feature network's)
    codes: int = 0
    patch: int | None = None
    cfg_dropout: float = 0.0
    vq_images: int = 0

    @classmethod
    def parse(cls, spec: dict, name: str = "recipe", kind: str | None = None) -> ToyRecipe:
        """`spec` checked and completed (`complete`); `kind` sets the kind of a recipe that
        names none (a trainer's own). A bad key is a ConfigError naming toy.models.<name>.
        Parsed once per recipe and process: config checks and the workflow's memory requests
        read a pair's recipes for every cell and batch."""
        return _parse(json.dumps(spec, sort_keys=True), name, kind)

    @classmethod
    def _parse(cls, spec: dict, name: str, kind: str | None) -> ToyRecipe:
        done = complete(spec if kind is None else {"kind": kind, **spec}, name)
        fields = {k: v for k, v in done.items() if k != "kind"}
        for key in ("scenarios", "text_scenarios"):
            if key in fields:
                fields[key] = tuple(fields[key])
        return cls(kind=done.get("kind", CAPTIONER), completed=done, **fields)

    @property
    def work(self) -> int:
        """Its training work: steps x batch x layers x width^2."""
        return self.steps * self.batch_size * self.layers * self.hidden**2


@functools.lru_cache(maxsize=256)
def _parse(text: str, name: str, kind: str | None) -> ToyRecipe:
    """`ToyRecipe.parse` of a recipe given as its JSON (the cache's key: all it reads)."""
    return ToyRecipe._parse(json.loads(text), name, kind)


def complete(spec: dict, name: str = "recipe") -> dict:
    """`spec` checked against the schema's toy model recipe and completed with its kind's
    defaults (a copy); a bad key is a ConfigError naming toy.models.<name> and the key."""
    node = schema.section("toy", "models")["additionalProperties"]
    return schema.complete(spec, node, f"toy.models.{name}")


def kind(spec: dict) -> str:
    """What a recipe trains (config/schema.yaml: toy.models.*.kind)."""
    return spec.get("kind", CAPTIONER)


def _kind_keys() -> dict[str, set[str]]:
    """Every key one kind of recipe alone reads (config/schema.yaml: the `then` of its kind's
    part of a recipe's `allOf`); the other keys are common to all kinds."""
    node = schema.section("toy", "models")["additionalProperties"]
    keys = {}
    for part in node["allOf"]:
        keys[part["if"]["properties"]["kind"]["const"]] = set(part["then"]["properties"])
    return keys


KIND_KEYS = _kind_keys()
