"""ANLS: DocVQA's Average Normalized Levenshtein Similarity, one answer's term.

Biten et al. 2019 (ST-VQA, eq. 1), the metric of DocVQA (Mathew et al. 2021): with NL(a, o) the
Levenshtein distance between a human answer a and the output o divided by the longer one's
length, an output scores max over the answers of 1 - NL(a, o) where NL(a, o) < 0.5, and 0 where
every answer is that far or further; the mean over questions is the ANLS. Both sides are
compared in lower case, trimmed, with runs of whitespace as one space (as the challenge's
evaluation does), so a casing or spacing slip costs nothing and an OCR slip a little.
"""

from __future__ import annotations

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import ANSWERS, TEXT, Sample, TaskMetric, answers

THRESHOLD = 0.5


def levenshtein(a: str, b: str) -> int:
    """The least insertions, deletions and substitutions of characters that turn a into b."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _clean(text: str) -> str:
    return " ".join(text.lower().split())


def similarity(answer: str, output: str) -> float:
    """1 - NL(answer, output) when NL < THRESHOLD, else 0 (two empty texts are equal)."""
    a, o = _clean(answer), _clean(output)
    longer = max(len(a), len(o))
    distance = levenshtein(a, o) / longer if longer else 0.0
    return 1.0 - distance if distance < THRESHOLD else 0.0


@metric_catalog.register
class ANLS(TaskMetric):
    name = "anls"
    description = (
        "DocVQA's normalized Levenshtein similarity: the best over the answers of 1 - edit "
        "distance / longer length, 0 where that distance is 0.5 or more; its mean is the ANLS"
    )
    source = "Biten et al. 2019 (ST-VQA), eq. 1, threshold 0.5; DocVQA (Mathew et al. 2021)"
    takes = frozenset({TEXT, ANSWERS})

    def score(self, output: str, reference: str | list[str], sample: Sample) -> float:
        return max(similarity(answer, output) for answer in answers(reference))
