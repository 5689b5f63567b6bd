"""No task metric: open-ended answers that no rule scores (a judge may score them)."""

from __future__ import annotations

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric


@metric_catalog.register
class NoMetric(TaskMetric):
    name = "none"
    description = "no task metric: quality stays empty (an LLM judge, `judge:`, may score answers)"
    source = "mmspec"
    takes = frozenset({TEXT, ANSWERS})

    @classmethod
    def problem(cls, reference: str | list[str]) -> str | None:
        return None  # nothing is compared with the reference

    def score(self, output: str, reference: str | list[str], sample: Sample) -> None:
        return None
