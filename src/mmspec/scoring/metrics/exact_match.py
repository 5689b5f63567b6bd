"""Exact match: the normalised answer equals the reference, or any of a list of answers."""

from __future__ import annotations

import re

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric, answers


def normalise(text: str) -> str:
    """Lower case; words and punctuation marks as tokens, one space apart."""
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


@metric_catalog.register
class ExactMatch(TaskMetric):
    name = "exact_match"
    description = (
        "1 if the normalised answer (lower case, words and punctuation marks one space apart) "
        "equals the normalised reference, or any answer of a list; else 0"
    )
    source = "mmspec (one reference: the normalisation mmspec always used)"
    takes = frozenset({TEXT, ANSWERS})

    def score(self, output: str, reference: str | list[str], sample: Sample) -> float:
        said = normalise(output)
        return float(any(said == normalise(answer) for answer in answers(reference)))
