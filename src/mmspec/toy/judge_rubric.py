"""The embedded judge's rubric on the toy world: an answer graded by its exact quality
(`toy.quality`), and VDC's first stage (a question answered from a caption) as a lookup."""

from __future__ import annotations

import re

from mmspec.toy import quality

MENTION = re.compile(rf"\b{quality.C} {quality.S}\b")  # "red circle"


def grade(answer: str, reference: str) -> float:
    """The toy world's exact quality of `answer`, in [0, 1], by the reference's form: a video
    description's list and motions, else video motions, else a caption's objects, else exact
    match of the normalised text."""
    answer, reference = quality.normalise(answer), quality.normalise(reference)
    if quality.motions(reference):
        if quality.LISTED.search(reference):  # toy_vdesc's opener lists the shapes
            return quality.score_description(answer, reference)
        return quality.score_video(answer, reference)
    if quality.objects(reference):
        return quality.score_caption(answer, reference)
    return float(answer == reference)


def answer(caption: str, question: str) -> str:
    """VDC stage 1 on the toy: the caption's sentences that mention a (colour, shape) the
    question names, or "not stated ." (no reasoning beyond that: it is a lookup)."""
    asked = set(MENTION.findall(quality.normalise(question)))
    sentences = [s.strip() + " ." for s in quality.normalise(caption).split(" .")]
    said = [s for s in sentences if s != "." and asked & set(MENTION.findall(s))]
    return " ".join(said) if said else "not stated ."
