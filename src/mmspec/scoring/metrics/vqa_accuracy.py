"""VQA accuracy: the official VQA v2 evaluation of one answer against its ten human answers.

What the official script computes (GT-Vision-Lab/VQA, PythonEvaluationTools/vqaEvaluation/
vqaEval.py, its `evaluate`, `processPunctuation` and `processDigitArticle`; Antol et al. 2015,
Goyal et al. 2017):

- normalisation: newlines and tabs become spaces and the ends are stripped; each punctuation
  mark of the script's list is deleted where it touches a space (or anywhere, when the text holds
  a digit-comma-digit group) and becomes a space elsewhere; a period is dropped unless a digit
  follows; then, word by word in lower case, number words become digits ("two" -> "2", "none"
  -> "0"), the articles a, an, the are dropped, and contractions written without their
  apostrophe get it back ("dont" -> "don't");
- accuracy: for each of the n human answers, the share of the other n - 1 that equal the model's
  answer, divided by 3 and capped at 1; averaged over the n (for n = 10 these are the 10 choose 9
  subsets of humans). An answer that at least 4 of 10 humans gave scores 1, one that 3 gave 0.9,
  2 gave 0.6, 1 gave 0.3.

One deliberate difference: the script normalises a question's answers only when its humans
disagree (VQA v2's annotation files hold normalised answers already); here the model's answer
and every human answer are always normalised, as TextVQA's evaluation (mmf's
TextVQAAccuracyEvaluator) and lmms-eval's VQA tasks do, so that "Nokia" matches "nokia" also
when all ten humans wrote "Nokia".

Where TextVQA's numbers differ: lmms-eval's TextVQA task cleans both sides with EvalAI's answer
processor first, which lower-cases, deletes every comma and "?" (here only where the script's
rules above delete them) and splits "'s" off a word ("it's" -> "it 's"); this metric follows
VQA v2's script and does not. The two disagree on a few answers, e.g. "it's" against five "its"
and five "it 's": 0 here, 1.0 under EvalAI's cleaner (4 of 8 000 generated cases differed).
"""

from __future__ import annotations

import re

from mmspec.scoring import metric_catalog
from mmspec.scoring.task_metric import ANSWERS, Sample, TaskMetric, describe

PUNCTUATION = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<"]
PUNCTUATION += ["@", "`", ",", "?", "!"]
DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
# the script's pattern, (?!<=\d)(\.)(?!\d), opens with a lookahead that a period never meets:
# in effect a period goes unless a digit follows it (the script also passes re.UNICODE, 32,
# where `sub` takes its count: it keeps the periods after the 32nd, which no answer reaches)
PERIOD = re.compile(r"\.(?!\d)")
NUMBERS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}  # fmt: skip
ARTICLES = {"a", "an", "the"}

# The contractions the script restores. A word that lacks the apostrophe of a single contraction,
# or one of the apostrophes of a double (or triple) one, gets its full spelling back.
SINGLE = """ain't aren't can't could've couldn't didn't doesn't don't hadn't hasn't haven't he'd
he's how'd how'll how's isn't it'd it'll ma'am mightn't might've mustn't must've needn't not've
o'clock oughtn't shan't should've shouldn't somebody'll somebody's someone'd someone'll someone's
something'd something'll that's there'd there're there's they'd they'll they're they've 'twas
wasn't we've weren't what'll what're what's what've when's where'd where's where've who'd who'll
who's who've why'll why're why's won't would've wouldn't y'all you'd you'll you're you've"""
DOUBLE = """couldn't've hadn't've he'd've it'd've mightn't've she'd've shouldn't've somebody'd've
someone'd've something'd've there'd've they'd've we'd've who'd've wouldn't've y'all'll you'd've
y'all'd've 'ow's'at"""
# the script's one reversed entry, kept so that both spellings still meet
QUIRKS = {"somebody'd": "somebodyd"}


def _contractions() -> dict[str, str]:
    table = {word.replace("'", ""): word for word in SINGLE.split()}
    for word in DOUBLE.split():
        marks = [i for i, c in enumerate(word) if c == "'"]
        table.update({word[:i] + word[i + 1 :]: word for i in marks})
    return {**table, **QUIRKS}


CONTRACTIONS = _contractions()
MIN_ANSWERS = 4  # with fewer humans no answer can reach 1: min((n - 1) / 3, 1) < 1


def normalise(answer: str) -> str:
    """An answer as the official evaluation compares it."""
    text = answer.replace("\n", " ").replace("\t", " ").strip()
    out = text
    strip_all = DIGIT_COMMA_DIGIT.search(text) is not None
    for mark in PUNCTUATION:
        # the script tests the text as it came in, not as the loop has changed it
        touches = f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if touches or strip_all else " ")
    out = PERIOD.sub("", out)
    words = [NUMBERS.get(w, w) for w in out.lower().split()]
    return " ".join(CONTRACTIONS.get(w, w) for w in words if w not in ARTICLES)


def vqa_accuracy(output: str, humans: list[str]) -> float:
    """min(#other humans who gave `output` / 3, 1), averaged over leaving out each human."""
    said = normalise(output)
    agree = [normalise(h) == said for h in humans]
    total = sum(agree)
    return sum(min(1.0, (total - mine) / 3) for mine in agree) / len(humans)


@metric_catalog.register
class VQAAccuracy(TaskMetric):
    name = "vqa_accuracy"
    description = (
        "the official VQA accuracy against the sample's human answers: min(#humans who gave the "
        "normalised answer / 3, 1), averaged over the subsets that leave out one human (at "
        "least 4 answers; TextVQA and VQA v2 have 10)"
    )
    source = (
        "VQA v2's official evaluation script (GT-Vision-Lab/VQA, vqaEval.py); both sides always "
        "normalised, as TextVQA's evaluation and lmms-eval do (lmms-eval's TextVQA task also "
        "applies EvalAI's cleaner, which differs on a few answers: the module's docstring)"
    )
    takes = frozenset({ANSWERS})

    @classmethod
    def problem(cls, reference: str | list[str]) -> str | None:
        found = super().problem(reference)
        if found is None and len(reference) < MIN_ANSWERS:
            found = (
                f"needs at least {MIN_ANSWERS} human answers (no answer reaches 1 with fewer), "
                f"got {describe(reference)}"
            )
        return found

    def score(self, output: str, reference: list[str], sample: Sample) -> float:
        return vqa_accuracy(output, reference)
