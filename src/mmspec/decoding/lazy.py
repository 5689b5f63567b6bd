"""torch, imported on first use by the modules that declare components.

Validating a sweep reads every component's declaration (name, params, requirements), which live
beside their implementations. Snakemake validates the config each time it parses the workflow
(every run, dry run and cluster job step), so the modules on that path import torch through these
stand-ins: `torch.x` imports torch the first time an attribute is read (a decode, a training
step), and then costs what a module attribute costs (each value read is kept on the stand-in).
`import torch` elsewhere is untouched: the stand-ins are not in `sys.modules`.
"""

from __future__ import annotations

import functools
import importlib
import types


class LazyModule(types.ModuleType):
    """Stands for the module `name` until one of its attributes is read."""

    def __getattr__(self, attr: str):  # only called for attributes not kept yet
        if attr.startswith("__"):
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self.__name__), attr)
        setattr(self, attr, value)
        return value


torch = LazyModule("torch")
F = LazyModule("torch.nn.functional")
nn = LazyModule("torch.nn")


def inference_mode(function):
    """`@torch.inference_mode()` without importing torch when the decorated function is defined."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with torch.inference_mode():
            return function(*args, **kwargs)

    return run
