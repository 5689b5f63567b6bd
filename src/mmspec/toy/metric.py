"""The toy world's task metric: its exact rubric (`toy.quality`), scored per scenario and turn.

The toy datasets are scored with it (their source's metric, `toy.dataset_source`); it joins the
metric catalog like any other metric.
"""

from __future__ import annotations

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import TEXT, Sample, TaskMetric
from mmspec.toy.dataset_source import METRIC


@metric_catalog.register
class ToyRubric(TaskMetric):
    name = METRIC
    description = (
        "the toy world's exact rubric: the facts of the answer that match the scene's ground "
        "truth, per scenario (object sets, the fact asked, the change, the story, the motions)"
    )
    source = "mmspec.toy.quality"
    takes = frozenset({TEXT})

    def score(self, output: str, reference: str, sample: Sample) -> float:
        from mmspec.toy.quality import score_toy

        return score_toy(sample.scenario, sample.turn, output, reference)
