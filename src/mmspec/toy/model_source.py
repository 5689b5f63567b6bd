"""The toy world as a model source: `toy:<name>`, a recipe of the config's `toy.models` that
the workflow trains into results/models/toy/<name> (rule toy_model).

Light on purpose: config validation and every stage that loads a model import it, so it imports
neither torch nor the code that trains or reads toy models: the readers of a trained toy
model's folder are named (`ToyModels.readers`), and imported only by the code that reads one.
"""

from __future__ import annotations

from pathlib import Path

from mmspec.models import footprint
from mmspec.models.source import FID_FEATURES, IMAGE_GENERATOR, ModelSource, register
from mmspec.schema import ConfigError
from mmspec.toy import recipe, world
from mmspec.toy.recipe import ToyRecipe

SCHEME = "toy"
PREFIX = f"{SCHEME}:"
MODELS_DIR = Path("results/models/toy")  # the toy_model rule's outputs


@register
class ToyModels(ModelSource):
    name = SCHEME
    scheme = SCHEME
    # read wherever the folder is (a trained toy model copied elsewhere is still one)
    readers = {
        IMAGE_GENERATOR: ("mmspec.toy.generator:read",),
        FID_FEATURES: ("mmspec.toy.features:read",),
    }

    def check(self, key: str, ref: str, what: str, config: dict) -> None:
        known = config["toy"]["models"]
        if _name(ref) not in known:
            raise ConfigError(
                f"config key {key}: {ref!r} names no model under toy.models (known: "
                f"{sorted(known)})"
            )

    def check_config(self, config: dict) -> None:
        """Each recipe sets only its kind's keys, and names scenarios and styles that exist."""
        specific = set().union(*recipe.KIND_KEYS.values())
        for name, spec in config["toy"]["models"].items():
            kind = recipe.kind(spec)
            stray = sorted((set(spec) & specific) - recipe.KIND_KEYS[kind])
            if stray:
                raise ConfigError(
                    f"config key toy.models.{name}.{stray[0]}: not read by a {kind!r} recipe"
                )
            parsed = ToyRecipe.parse(spec, name)
            for key in ("scenarios", "text_scenarios"):
                for picked in getattr(parsed, key):
                    if picked not in world.DATASETS:
                        raise ConfigError(
                            f"config key toy.models.{name}.{key}: unknown toy scenario "
                            f"{picked!r}; known: {sorted(world.DATASETS)}"
                        )
            style = parsed.vdesc_style
            if style is not None and style not in world.HOUSE_STYLES:
                raise ConfigError(
                    f"config key toy.models.{name}.vdesc_style: unknown house style {style!r}; "
                    f"known: {sorted(world.HOUSE_STYLES)}"
                )

    def kind(self, ref: str, config: dict) -> str:
        return recipe.kind(_recipe(ref, config))

    def language_layers(self, ref: str, config: dict) -> int | None:
        return _recipe(ref, config).get("layers")

    def codebook(self, ref: str, config: dict) -> dict | None:
        parsed = ToyRecipe.parse(_recipe(ref, config), _name(ref))
        if parsed.kind != IMAGE_GENERATOR:
            return None
        return {key: getattr(parsed, key) for key in recipe.CODEBOOK_KEYS}

    def folder(self, ref: str) -> Path | None:
        path = MODELS_DIR / _name(ref)
        return path if (path / "config.json").exists() else None

    def location(self, ref: str) -> str:
        path = MODELS_DIR / _name(ref)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{path}: toy model {ref!r} is not trained (run toy_model)")
        return str(path)

    def workflow_output(self, ref: str) -> str:
        return str(MODELS_DIR / _name(ref))

    def parameters(self, ref: str, recipes: dict | None) -> tuple[int, str]:
        spec = (recipes or {}).get(_name(ref))
        if spec is None:
            return 0, ""
        parsed = ToyRecipe.parse(spec, _name(ref))
        return footprint.config_parameters(model_config(parsed)), "toy config"

    def folder_name(self, ref: str) -> str:
        return f"{SCHEME}-{_name(ref)}"


def _name(ref: str) -> str:
    return ref.removeprefix(PREFIX)


def _recipe(ref: str, config: dict) -> dict:
    return config["toy"]["models"][_name(ref)]


def model_config(recipe: ToyRecipe) -> dict:
    """The config.json of a toy model of `recipe`, as far as its size goes: mirrors
    toy.training.build_model (a ~70-word vocabulary; an image generator's adds its codes, and
    it has no vision tower)."""
    text = {
        "vocab_size": 128 + recipe.codes,
        "hidden_size": recipe.hidden,
        "intermediate_size": 2 * recipe.hidden,
        "num_hidden_layers": recipe.layers,
    }
    if recipe.kind == IMAGE_GENERATOR:
        return text
    width = recipe.vision_hidden
    vision = {"hidden_size": width, "intermediate_size": 2 * width, "num_hidden_layers": 2}
    return {"text_config": text, "vision_config": {**vision, "patch_size": 8}}
