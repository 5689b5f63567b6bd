"""ROUGE-L by torchmetrics: word overlap with the reference, for longer free-form answers.

One output is scored (sentence level) against its reference or, for a list of answers, against
the answer it matches best; a cell's quality is the mean over its sample-turns (not a
corpus-level score). It runs on what mmspec installs (torchmetrics, without nltk: no stemmer).
"""

from __future__ import annotations

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric, answers


@metric_catalog.register
class RougeL(TaskMetric):
    name = "rouge_l"
    description = (
        "ROUGE-L F-measure, in [0, 1]: the longest common subsequence of words (lower case, "
        "letters and digits only) against the reference, or the best-matching answer of a list"
    )
    source = "Lin 2004; torchmetrics.functional.text.rouge_score (rougeL, no stemmer)"
    takes = frozenset({TEXT, ANSWERS})

    def score(self, output: str, reference: str | list[str], sample: Sample) -> float:
        from torchmetrics.functional.text import rouge_score

        scores = rouge_score(output, answers(reference), rouge_keys="rougeL", accumulate="best")
        return float(scores["rougeL_fmeasure"])
