"""Exact quality of toy-world answers: parse output and reference into facts and compare them.

Parsing is a handful of regular expressions over the toy grammar, so garbage, truncated or
ungrammatical outputs score the facts they do state correctly and never raise.
- toy_caption, toy_multiturn turn 0: Jaccard of the (colour, shape, position) object sets.
- toy_vqa: 1 if the fact answered matches, else 0: the attribute asked (colour, shape or
  position) together with the object or corner the answer repeats from the question.
- toy_diff: 1 if the change (kind and attributes) matches, 0.5 if only the kind does, else 0.
- toy_multiturn turn 1: the follow-up kind is read off the reference's form. A new-image VQA
  answer (a VQA sentence form) is scored as toy_vqa, a new-image caption (object phrases) as a
  caption; the rest, follow-ups about the prior caption ("there are two shapes .") and text-only
  reasoning ("red and blue make purple .", "a square has four sides ."), by exact match of the
  normalised text.
- toy_story: fraction right of 6 facts: (colour, shape) and the position in each of 5 frames.
- toy_video: per object of the reference, the share of its corners (start, then each stop) that
  the output's sentence about the same (colour, shape) states in the same place; averaged.
- toy_vdesc: as toy_video, each object with one fact more: that the opener lists it ("the clip
  shows the red circle and ...", in any order); a description's fillers score nothing either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mmspec.toy.world import COLOURS, POSITIONS, SHAPES, SYNONYMS

SCENARIOS = (
    "toy_caption",
    "toy_vqa",
    "toy_diff",
    "toy_multiturn",
    "toy_story",
    "toy_video",
    "toy_vdesc",
)

C = "(" + "|".join(COLOURS) + ")"
S = "(" + "|".join(SHAPES) + ")"
P = "(" + "|".join(POSITIONS) + ")"
A = "an?"  # article: "a red", "an orange" (either is accepted)

OBJECT = re.compile(rf"\b{C} {S} at the {P}\b")
VQA = [  # answers to where, what shape, what colour
    re.compile(rf"\bthe {C} {S} is at the {P}\b"),
    re.compile(rf"\b{A} {S} is at the {P}\b"),
    re.compile(rf"\bthe {S} is {C}\b"),
]
CHANGES = {  # kind -> (full pattern, the word that gives the kind away)
    "recolour": (re.compile(rf"\bthe {C} {S} at the {P} became {C}\b"), "became"),
    "move": (re.compile(rf"\bthe {C} {S} moved from the {P} to the {P}\b"), "moved"),
    "appear": (re.compile(rf"\b{A} {C} {S} appeared at the {P}\b"), "appeared"),
    "disappear": (re.compile(rf"\bthe {C} {S} at the {P} disappeared\b"), "disappeared"),
}
STORY_START = re.compile(rf"\bfirst {A} {C} {S} is at the {P}\b")
STORY_MOVE = re.compile(rf"\bmoves to the {P}\b")
MOTION = re.compile(
    rf"\bthe {C} {S} (?:stays at|moves from) the {P}((?: (?:to|, then to) the {P})*)"
)
HOP = re.compile(rf"to the {P}")
SHOWS = "(?:" + "|".join(SYNONYMS["shows"]) + ")"
LISTED = re.compile(rf"\b{SHOWS} the {C} {S}(?: and the {C} {S})?")  # toy_vdesc's list


def normalise(text: str) -> str:
    """Lower case, punctuation split off as tokens, single spaces."""
    return " ".join(re.sub(r"([,.?:!;])", r" \1 ", text.lower()).split())


def objects(text: str) -> set[tuple[str, str, str]]:
    return set(OBJECT.findall(text))


def score_caption(output: str, reference: str) -> float:
    pred, ref = objects(output), objects(reference)
    return len(pred & ref) / len(pred | ref) if pred | ref else 1.0


def score_vqa(output: str, reference: str) -> float:
    for pattern in VQA:  # the reference's sentence form tells which question it was
        if ref := pattern.search(reference):
            out = pattern.search(output)
            return float(out is not None and out.groups() == ref.groups())
    return float(output == reference)


def change(text: str) -> tuple:
    """The first change stated: (kind, *attributes), just (kind,) if truncated, () if none."""
    found = []
    for kind, (pattern, word) in CHANGES.items():
        if m := pattern.search(text):
            found.append((m.start(), (kind, *m.groups())))
        elif (i := f" {text} ".find(f" {word} ")) >= 0:
            found.append((i, (kind,)))
    return min(found)[1] if found else ()


def score_diff(output: str, reference: str) -> float:
    pred, ref = change(output), change(reference)
    if pred == ref:
        return 1.0
    return 0.5 if pred and ref and pred[0] == ref[0] else 0.0


def story(text: str) -> tuple[tuple[str, str] | None, list[str | None]]:
    """((colour, shape), [position of each frame]), with None where the text does not say."""
    start = STORY_START.search(text)
    first = start.group(3) if start else None
    what = start.group(1, 2) if start else None
    return what, [first] + STORY_MOVE.findall(text)


def score_story(output: str, reference: str) -> float:
    (what, walk), (ref_what, ref_walk) = story(output), story(reference)
    hits = [what is not None and what == ref_what]
    hits += [p is not None and p == q for p, q in zip(walk, ref_walk, strict=False)]
    hits += [False] * (len(ref_walk) - len(walk))  # missing frames
    return sum(hits) / (1 + len(ref_walk))


def motions(text: str) -> dict[tuple[str, str], list[str]]:
    """(colour, shape) -> the corners its sentence names, in order (first sentence per object)."""
    found: dict[tuple[str, str], list[str]] = {}
    for m in MOTION.finditer(text):
        found.setdefault((m.group(1), m.group(2)), [m.group(3)] + HOP.findall(m.group(4)))
    return found


def score_video(output: str, reference: str, with_list: bool = False) -> float:
    """Per object of the reference, its corners that the output states in the same place (extra
    stops count against), and with `with_list` one fact more: that the opener lists it."""
    pred, ref = motions(output), motions(reference)
    if not ref:
        return float(output == reference)
    named = set(listed(output)) if with_list else set()
    scores = []
    for what, stops in ref.items():
        said = pred.get(what, [])
        hits = (what in named) + sum(p == q for p, q in zip(said, stops, strict=False))
        scores.append(hits / (with_list + max(len(stops), len(said))))
    return sum(scores) / len(scores)


def listed(text: str) -> list[tuple[str, str]]:
    """The (colour, shape) pairs that toy_vdesc's opener lists ("the clip shows the red circle and
    the blue square"), in order; none where it lists nothing."""
    found = LISTED.search(text)
    groups = found.groups() if found else ()
    return [(groups[i], groups[i + 1]) for i in range(0, len(groups), 2) if groups[i]]


def score_description(output: str, reference: str) -> float:
    """toy_vdesc: score_video with each object's listing in the opener as one fact more."""
    return score_video(output, reference, with_list=True)


def score_follow_up(output: str, reference: str) -> float:
    """toy_multiturn turn 1, of whichever kind the reference's form gives away."""
    if any(pattern.search(reference) for pattern in VQA):  # a question about a new image
        return score_vqa(output, reference)
    if objects(reference):  # a caption of a new image
        return score_caption(output, reference)
    return float(output == reference)  # about the prior caption, or text-only reasoning


def score_toy(scenario: str, turn: int, output: str, reference: str) -> float:
    """Quality of `output` against `reference`, in [0, 1]."""
    output, reference = normalise(output), normalise(reference)
    if scenario == "toy_caption" or (scenario == "toy_multiturn" and turn == 0):
        return score_caption(output, reference)
    if scenario == "toy_multiturn":
        return score_follow_up(output, reference)
    if scenario == "toy_vqa":
        return score_vqa(output, reference)
    if scenario == "toy_diff":
        return score_diff(output, reference)
    if scenario == "toy_story":
        return score_story(output, reference)
    if scenario == "toy_video":
        return score_video(output, reference)
    if scenario == "toy_vdesc":  # a description's fillers are not scored
        return score_description(output, reference)
    raise ValueError(f"unknown toy scenario {scenario!r}; known: {SCENARIOS}")


def score_rows(rows: Iterable[dict], output_key: str = "output_text") -> list[float]:
    """score_toy over rows holding scenario, turn, reference and the output under `output_key`."""
    return [score_toy(r["scenario"], r["turn"], r[output_key], r["reference"]) for r in rows]
