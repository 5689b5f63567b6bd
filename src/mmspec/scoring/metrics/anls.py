"""ANLS: DocVQA's Average Normalized Levenshtein Similarity, one answer's term.

As DocVQA's official evaluation script computes it (the RRC challenge's `evaluate_method`; the
copy lmms-eval's DocVQA and InfoVQA tasks run), after Biten et al. 2019 (ST-VQA, eq. 1): for each
human answer a, NL(a, o) is the Levenshtein distance between a and the output o, both in lower
case, trimmed, with runs of whitespace as one space, divided by the longer of the two *raw* texts
in upper case (so spaces the comparison dropped still count in the length, and "ß", "SS" in
upper case, counts two); the question scores 1 - min over the answers of NL, and 0 where that is
below 0.5 (a score of exactly 0.5 stands). ST-VQA's formula differs at both points (it zeroes
NL >= 0.5, and divides by the compared texts' lengths): DocVQA's script is what users compare
with, so this follows it; the mean over questions is the ANLS.
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


def normalized_distance(answer: str, output: str) -> float:
    """NL(answer, output): the cleaned texts' edit distance over the longer raw upper-cased
    length, as DocVQA's script divides (0 for two empty texts)."""
    longer = max(len(answer.upper()), len(output.upper()))
    return levenshtein(_clean(answer), _clean(output)) / longer if longer else 0.0


def similarity(answers: list[str], output: str) -> float:
    """1 - the least NL over the answers, or 0 where that is below THRESHOLD."""
    best = 1.0 - min(normalized_distance(answer, output) for answer in answers)
    return 0.0 if best < THRESHOLD else best


@metric_catalog.register
class ANLS(TaskMetric):
    name = "anls"
    description = (
        "DocVQA's normalized Levenshtein similarity, as its official script computes it: the "
        "best over the answers of 1 - edit distance / longer raw length, 0 where that is below "
        "0.5; its mean is the ANLS"
    )
    source = (
        "DocVQA's official evaluation script (Mathew et al. 2021; lmms-eval's copy), after "
        "Biten et al. 2019 (ST-VQA), eq. 1, threshold 0.5"
    )
    takes = frozenset({TEXT, ANSWERS})

    def score(self, output: str, reference: str | list[str], sample: Sample) -> float:
        return similarity(answers(reference), output)
