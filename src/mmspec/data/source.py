"""Dataset sources: what a dataset entry's `source:` names (`hf`, `toy`, a plugin's), each one
class on this protocol, found by that name as components are (`decoding.catalog`).

A source declares its entries' form (`entry_schema`: a JSON schema, config/schema.yaml's for
the built-in ones), what is checked before any job (`check`), what its samples ask for
(`task`), the task metric that scores them (`metric`), how many sample-turns a cell decodes
when that is known before anything is prepared (`sample_turns`, for `mmspec plan`), whether its
samples have second turns (`has_second_turns`, for the scorecard's plan), the judge template
that grades them and whether they carry the questions it asks (`judge`, `has_qa`), how many
samples its entry asks for (`size`), how its prepare job writes the PREPARED table (`prepare`)
and, when it knows its answers exactly, the rubric the embedded judge grades with (`rubric`: a
module named, not imported, so that a rubric's code is the judge's alone).

Built-in sources register when their modules are imported (`BUILT_IN_MODULES`: Hugging Face
datasets, by hub id or local folder, in `data.hf_source`; the toy world's scenarios in
`toy.dataset_source`). A researcher's own package adds sources through the entry point group
`mmspec.dataset_sources`, each entry point naming a DatasetSource subclass. Validation imports
no torch: a source imports what preparing needs inside `prepare`.
"""

from __future__ import annotations

from typing import ClassVar

from mmspec import schema
from mmspec.data.media import ANSWER
from mmspec.plugins import import_closure
from mmspec.plugins.catalog import Catalog
from mmspec.plugins.catalog import CatalogError as CatalogError  # what callers catch

GROUP = "mmspec.dataset_sources"
BUILT_IN_MODULES = ("mmspec.data.hf_source", "mmspec.toy.dataset_source")


class DatasetSource:
    """A kind of dataset, named by an entry's `source`. `name` is the dataset's name in the
    config, `entry` its validated entry (defaults filled in)."""

    kind: ClassVar[str] = ""  # the entries' `source`
    description: ClassVar[str] = ""  # a phrase for the docs and errors
    # the module of its exact rubric, if it has one: `grade(answer, reference)` in [0, 1] and
    # `answer(caption, question)`, a question answered from a caption alone (VDC's first stage)
    rubric: ClassVar[str | None] = None
    # the entry key capping how many samples it holds (`mmspec pilot` lowers it for a pilot
    # run, `mmspec plan` scales a pilot's turns per sample by it); None: it cannot be capped
    size_key: ClassVar[str | None] = None

    def entry_schema(self) -> dict:
        """The JSON schema of an entry (its `source` a `const` of `kind`)."""
        return schema.section("datasets", self.kind)

    def check(self, name: str, entry: dict) -> None:
        """Raise ValueError for an entry its prepare job would refuse (beyond the schema)."""

    def task(self, name: str, entry: dict) -> str:
        """What the samples ask for: `media.ANSWER` or `media.IMAGE_GENERATION`."""
        return entry.get("task", ANSWER)

    def metric(self, name: str, entry: dict) -> str:
        """The task metric (`scoring.metric_catalog`) that scores the answers: the entry's
        `metric` (which its schema declares with a default)."""
        if "metric" not in entry:
            raise ValueError(
                f"source {self.kind!r} names no task metric for its entries (declare `metric` "
                "with a default in its entry_schema, or override DatasetSource.metric)"
            )
        return entry["metric"]

    def judge(self, name: str, entry: dict) -> str | None:
        """The lmms-eval template its answers are judged by (the entry's `judge`), or None."""
        return entry.get("judge")

    def has_qa(self, name: str, entry: dict) -> bool:
        """Whether each sample carries a list of {question, answer} (the PREPARED `qa` field),
        which the `vdc` judge template asks of each answer."""
        return False

    def size(self, name: str, entry: dict) -> int | None:
        """The samples its entry asks for (its `size_key`), or None: not capped."""
        return entry.get(self.size_key) if self.size_key else None

    def inputs(self, name: str, entry: dict) -> list[str]:
        """Local files the prepared table is made from: the prepare job's inputs, so that editing
        one re-prepares the dataset. A Hugging Face source names none: a hub dataset is pinned
        by its revision, and a local dataset folder is rerun with `--forcerun prepare`."""
        return []

    def sample_turns(self, name: str, entry: dict, config: dict) -> int | None:
        """The rows its prepared table will hold, if known before it is prepared."""
        return None

    def has_second_turns(self, name: str, entry: dict) -> bool:
        """Whether a sample can have a second turn."""
        return False

    def prepare(self, name: str, entry: dict, out: str, seed: int) -> int:
        """Write the PREPARED table to `out`; return its rows. `seed`: the sweep's seed of
        generated samples (an entry may set its own)."""
        raise NotImplementedError


CATALOG = Catalog(
    noun="dataset source",
    base=DatasetSource,
    base_home="data.source",
    group=GROUP,
    built_in_modules=BUILT_IN_MODULES,
    name_attr="kind",
)
register = CATALOG.register
load = CATALOG.load


def sources() -> dict[str, DatasetSource]:
    """kind -> source, in the order they registered."""
    return {kind: source() for kind, source in CATALOG.of_section().items()}


def get(kind: str) -> DatasetSource:
    """The source of `kind`; CatalogError naming close matches and the known kinds."""
    return CATALOG.get(kind)()


def of(entry: dict) -> DatasetSource:
    """The source of a dataset entry."""
    return get(entry["source"])


def plugin_code(entry: dict) -> str:
    """The code of the entry's source when a plugin adds it (import_closure.foreign_code): part
    of its prepare job's fingerprint, so editing the source re-prepares the datasets it reads."""
    return import_closure.foreign_code([type(of(entry))])


def rubric() -> str | None:
    """The module of the first exact rubric a source declares (the embedded judge's)."""
    return next((s.rubric for s in sources().values() if s.rubric is not None), None)
