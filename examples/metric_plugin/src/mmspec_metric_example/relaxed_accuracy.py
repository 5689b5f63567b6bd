"""ChartQA's relaxed accuracy (Masry et al. 2022) as an mmspec task metric.

A numeric answer is right within 5% of a numeric reference (a trailing % reads as a fraction);
any other answer is right when it equals the reference, case and surrounding spaces aside.
"""

from __future__ import annotations

from mmspec.api import TEXT, Sample, TaskMetric

TOLERANCE = 0.05


def number(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_match(output: str, reference: str) -> bool:
    said, wanted = number(output), number(reference)
    if said is not None and wanted:  # a reference of 0 leaves no relative tolerance
        return abs(said - wanted) / abs(wanted) <= TOLERANCE
    return output.strip().lower() == reference.strip().lower()


class RelaxedAccuracy(TaskMetric):
    name = "relaxed_accuracy"
    description = "1 if a numeric answer is within 5% of the reference, else if it equals it"
    source = "ChartQA (Masry et al. 2022), relaxed accuracy"
    takes = frozenset({TEXT})

    def score(self, output: str, reference: str, sample: Sample) -> float:
        return float(relaxed_match(output, reference))
