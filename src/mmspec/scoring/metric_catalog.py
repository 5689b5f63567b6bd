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

from mmspec.plugins import import_closure
from mmspec.plugins.catalog import Catalog
from mmspec.plugins.catalog import CatalogError as CatalogError  # what callers catch
from mmspec.scoring.task_metric import TaskMetric

GROUP = "mmspec.metrics"
BUILT_IN_MODULES = ("mmspec.toy.metric",)
BUILT_IN_PACKAGES = ("mmspec.scoring.metrics",)

CATALOG = Catalog(
    noun="metric",
    base=TaskMetric,
    base_home="scoring.task_metric",
    group=GROUP,
    built_in_modules=BUILT_IN_MODULES,
    built_in_packages=BUILT_IN_PACKAGES,
)
register = CATALOG.register
load = CATALOG.load
built_in_modules = CATALOG.built_in_module_names
is_plugin = CATALOG.is_plugin


def metrics() -> dict[str, type[TaskMetric]]:
    """name -> metric class."""
    return CATALOG.of_section()


def get(name: str) -> type[TaskMetric]:
    """The metric named `name`; CatalogError naming close matches and the known names."""
    return CATALOG.get(name)


def plugin_code(name: str) -> str:
    """A short hash of the code of metric `name` when an installed plugin adds it, with every
    module it imports ("" for mmspec's own, which the score stage's fingerprint holds): part of
    the score jobs' code fingerprint, so that editing a plugin's metric or a helper module of it
    rescores the datasets that name it."""
    metric = metrics().get(name)
    if metric is None or not is_plugin(metric):
        return ""
    return "+" + import_closure.digest((metric.__module__,))
