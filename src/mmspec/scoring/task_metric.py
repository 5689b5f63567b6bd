"""What a task metric declares about itself, and how it scores one answer.

A task metric is one class: its `name` (what a dataset's `metric:` names), a `description`, the
`source` of its definition (a paper, an evaluation script), whether higher is better, and which
reference shapes it `takes`: one reference text (`TEXT`), a list of acceptable answers
(`ANSWERS`: TextVQA's ten human answers, DocVQA's answers), or either. `score` rates one output
against its sample's reference(s). The metric catalog (`scoring.metric_catalog`) fills itself
from these declarations; config validation, the score stage, fingerprints and the docs read them,
so a new metric is one class, and a researcher's own package adds some through the entry point
group `mmspec.metrics`.

A module that declares metrics imports nothing heavy at its top (config validation imports it on
every Snakemake parse); what scoring needs (torchmetrics, the toy rubric) is imported in `score`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

TEXT = "text"  # one reference text
ANSWERS = "answers"  # a list of acceptable answers
SHAPES = {TEXT: "one reference text", ANSWERS: "a list of answers"}


@dataclass(frozen=True)
class Sample:
    """The sample-turn an output answers (what a metric may read besides the references)."""

    sample_id: str  # the prepared table's `sample_id`
    turn: int  # the turn of a multi-turn sample (0: the first)
    scenario: str  # the dataset's name, or a toy scenario


def shape(reference: str | list[str]) -> str:
    """The shape of a prepared sample's reference: TEXT or ANSWERS."""
    return ANSWERS if isinstance(reference, list) else TEXT


def describe(reference: str | list[str]) -> str:
    """A reference in a few words, for an error."""
    if isinstance(reference, list):
        return f"a list of {len(reference)} answers {str(reference)[:80]}"
    return f"one reference text {reference[:80]!r}"


class TaskMetric:
    """A task metric. Subclasses set the class attributes and implement `score`."""

    name: ClassVar[str] = ""  # what a dataset's `metric:` names
    description: ClassVar[str] = ""  # a phrase for the metrics reference
    source: ClassVar[str] = ""  # where its definition comes from
    higher_is_better: ClassVar[bool] = True  # its direction (retention needs True)
    takes: ClassVar[frozenset[str]] = frozenset({TEXT})  # the reference shapes it scores

    @classmethod
    def problem(cls, reference: str | list[str]) -> str | None:
        """Why this metric cannot score against `reference`, in words; None when it can."""
        if shape(reference) not in cls.takes:
            wanted = " or ".join(SHAPES[s] for s in sorted(cls.takes, reverse=True))
            return f"takes {wanted}, got {describe(reference)}"
        if isinstance(reference, list) and not reference:
            return "got an empty list of answers"
        return None

    def score(self, output: str, reference: str | list[str], sample: Sample) -> float | None:
        """The quality of `output` (None: not scored); `reference` has a shape of `takes`."""
        raise NotImplementedError


def answers(reference: str | list[str]) -> list[str]:
    """A reference as a list of acceptable answers (one text is a list of one)."""
    return [reference] if isinstance(reference, str) else list(reference)
