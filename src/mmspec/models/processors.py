"""Processors of every supported family, with or without torchvision.

transformers' processors of LLaVA-OneVision, LLaVA-NeXT-Video, Qwen2/2.5-VL and SmolVLM carry a
video processor, and Pixtral's (Mistral3) imports a torchvision image processor, so with no
torchvision (the CPU install: the registry's torchvision does not load with the pinned CPU torch)
`AutoProcessor` fails before any image is seen. In that case mmspec assembles the family's own
processor class around the PIL image processor transformers ships for every family and, for the
families whose videos mmspec reads as videos, the PIL video processor of `video_processing` (for
the others no video processor: their videos are read as frames). The prompt layout (placeholder
expansion, tiling, image and video markers) is the family's own code either way; with
torchvision installed (GPU installs) `AutoProcessor` is used unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from functools import cache

from mmspec.models import families, video_processing
from mmspec.models.video_processing import VideoProcessor as Video


def has_torchvision() -> bool:
    return importlib.util.find_spec("torchvision") is not None


@cache
def _pixtral_helper_shim() -> None:
    """Pixtral's processor module imports one helper from the torchvision image processor; the
    PIL image processor defines the same function (same signature), so serve it from there."""
    name = "transformers.models.pixtral.image_processing_pixtral"
    if has_torchvision() or name in sys.modules:
        return
    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    shim = types.ModuleType(name)
    shim.get_resize_output_image_size = pil.get_resize_output_image_size
    sys.modules[name] = shim


def _processor_module(class_name: str):
    """The transformers module that defines processor class `class_name`."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    for model_type, name in PROCESSOR_MAPPING_NAMES.items():
        if name != class_name:
            continue
        module = model_type_to_module_name(model_type)
        try:
            return importlib.import_module(f"transformers.models.{module}.processing_{module}")
        except ModuleNotFoundError:
            continue  # a model type that reuses another family's processor
    raise ValueError(f"unknown processor class {class_name!r}")


@cache
def without_torchvision(class_name: str) -> type:
    """The family's processor class, taking mmspec's PIL video processor or none.

    The class keeps the family's `__init__` (its signature drives saving and loading); the video
    processor is never saved (a model folder keeps its own video processor config, which
    `video_processing` reads).
    """
    _pixtral_helper_shim()
    base = getattr(_processor_module(class_name), class_name)
    attributes = base.get_attributes()
    if not any("video" in a for a in attributes):
        return base

    class WithoutTorchvision(base):
        hide_video = False  # set while saving: the folder's own video config stays as it is

        @classmethod
        def get_attributes(cls):
            return [a for a in attributes if not (cls.hide_video and "video" in a)]

        def save_pretrained(self, *args, **kwargs):
            return self._without_video(super().save_pretrained, *args, **kwargs)

        def to_dict(self):
            out = self._without_video(super().to_dict)
            out.pop("video_processor", None)  # an `__init__` argument, but not saved here
            return out

        def _without_video(self, method, *args, **kwargs):
            type(self).hide_video = True
            try:
                return method(*args, **kwargs)
            finally:
                type(self).hide_video = False

        def apply_chat_template(self, conversation, chat_template=None, **kwargs):
            # some families (SmolVLM) override this only to default video sampling from their
            # torchvision video processor; mmspec's videos come as sampled frames
            from transformers.processing_utils import ProcessorMixin

            return ProcessorMixin.apply_chat_template(self, conversation, chat_template, **kwargs)

        def check_argument_for_proper_class(self, argument_name, argument):
            if "video" in argument_name and (argument is None or isinstance(argument, Video)):
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

        @classmethod
        def _get_arguments_from_pretrained(cls, path, processor_dict=None, **kwargs):
            from transformers import AutoImageProcessor

            kwargs.pop("subfolder", None)
            args = []
            folder = families.local_files(str(path))
            for attribute in attributes:
                if "video" in attribute:
                    args.append(video_processing.load(family_of_path(path), folder))
                elif "tokenizer" in attribute:
                    args.append(cls._load_tokenizer_from_pretrained(attribute, path, **kwargs))
                else:
                    args.append(AutoImageProcessor.from_pretrained(path, **kwargs))
            return args

    WithoutTorchvision.__name__ = WithoutTorchvision.__qualname__ = class_name
    WithoutTorchvision.__module__ = base.__module__
    return WithoutTorchvision


def family_of_path(path) -> str:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).model_type


def processor_class_of(path: str) -> str:
    """The processor class a model folder or hub id names (processor or model config)."""
    from transformers import AutoConfig
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    config = AutoConfig.from_pretrained(path)
    name = PROCESSOR_MAPPING_NAMES.get(config.model_type)
    if name is None:
        raise ValueError(f"{path}: no processor is known for model type {config.model_type!r}")
    return name


def load(path: str):
    """The model's processor: `AutoProcessor`, or its assembly without torchvision."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path)
    except Exception as error:  # transformers raises ImportError or AttributeError here
        if has_torchvision():
            raise
        try:
            cls = without_torchvision(processor_class_of(path))
        except ValueError:
            raise error from None
        return cls.from_pretrained(path)
