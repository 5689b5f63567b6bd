"""The catalog of task metrics, by name, filled from their own declarations
(`scoring.task_metric`), as `decoding.catalog` is for a method's components.

Built-in metrics register when their modules are imported (every module of `scoring.metrics`,
and the toy world's rubric). A researcher's own package adds metrics without a fork through the
entry point group `mmspec.metrics`: each entry point names a TaskMetric subclass, e.g. in its
pyproject.toml

    [project.entry-points."mmspec.metrics"]
    relaxed_accuracy = "my_package.metrics:RelaxedAccuracy"

Their names then work in a dataset's `metric:`, in config validation and in the score stage, and
their code (with every module it imports) is part of the score jobs' code fingerprint.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil

from mmspec import import_closure, plugins
from mmspec.scoring.task_metric import TaskMetric

GROUP = "mmspec.metrics"
BUILT_IN_MODULES = ("mmspec.toy.metric",)
BUILT_IN_PACKAGES = ("mmspec.scoring.metrics",)

_METRICS: dict[str, type[TaskMetric]] = {}
_PLUGINS: dict[str, str] = {}  # metric name -> the entry point that added it
_loaded = False


class CatalogError(ValueError):
    """A metric that cannot join the catalog, or a name it does not hold."""


def register(metric: type[TaskMetric]) -> type[TaskMetric]:
    """Add a metric class (a class decorator). Two metrics may not share a name."""
    if not (inspect.isclass(metric) and issubclass(metric, TaskMetric)):
        raise CatalogError(f"{metric!r} is not a TaskMetric subclass (scoring.task_metric)")
    if not metric.name:
        raise CatalogError(f"{metric.__qualname__} declares no name")
    known = _METRICS.get(metric.name)
    if known is not None and known is not metric:
        raise CatalogError(
            f"metric {metric.name!r} is declared twice: by {_where(known)} and by {_where(metric)}"
        )
    _METRICS[metric.name] = metric
    return metric


def _where(metric: type[TaskMetric]) -> str:
    return f"{metric.__module__}.{metric.__qualname__}"


def load() -> None:
    """Import the built-in metrics and the installed plugins' (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in built_in_modules():
        _register_declared(importlib.import_module(module))
    for entry, loaded in plugins.load_group(GROUP, "metric", CatalogError):
        if not (inspect.isclass(loaded) and issubclass(loaded, TaskMetric)):
            raise CatalogError(
                f"the metric plugin {entry.name!r} ({entry.value}, entry point group {GROUP}) "
                "names no TaskMetric subclass (scoring.task_metric)"
            )
        try:
            register(loaded)
        except CatalogError as error:
            raise CatalogError(
                f"the metric plugin {entry.name!r} ({entry.value}, entry point group {GROUP}): "
                f"{error}"
            ) from None
        _PLUGINS[loaded.name] = entry.value


def _register_declared(module) -> None:
    """Register the metrics `module` declares. Its first import registered them, but a module
    is imported once per process: a catalog emptied since (as a test does) finds them here."""
    for value in vars(module).values():
        own = inspect.isclass(value) and value.__module__ == module.__name__
        if own and issubclass(value, TaskMetric) and value.name:
            register(value)


def built_in_modules() -> list[str]:
    """The modules that declare the built-in metrics."""
    found = list(BUILT_IN_MODULES)
    for name in BUILT_IN_PACKAGES:
        package = importlib.import_module(name)
        found += [f"{name}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    return found


def metrics() -> dict[str, type[TaskMetric]]:
    """name -> metric class."""
    load()
    return dict(_METRICS)


def get(name: str) -> type[TaskMetric]:
    """The metric named `name`; CatalogError listing the known names."""
    found = metrics().get(name)
    if found is None:
        close = difflib.get_close_matches(name, list(_METRICS), n=2)
        guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise CatalogError(
            f"unknown metric {name!r}{guess}; known: {sorted(_METRICS)} (a plugin package adds "
            f"task metrics through the entry point group {GROUP}: is it installed?)"
        )
    return found


def is_plugin(metric: type[TaskMetric]) -> bool:
    """Whether an installed plugin added the metric (not mmspec)."""
    load()
    return _PLUGINS.get(metric.name) is not None and _METRICS.get(metric.name) is metric


def plugin_code(name: str) -> str:
    """A short hash of the code of metric `name` when an installed plugin adds it, with every
    module it imports ("" for mmspec's own, which the score stage's fingerprint holds): part of
    the score jobs' code fingerprint, so that editing a plugin's metric or a helper module of it
    rescores the datasets that name it."""
    metric = metrics().get(name)
    if metric is None or not is_plugin(metric):
        return ""
    return "+" + import_closure.digest((metric.__module__,))
