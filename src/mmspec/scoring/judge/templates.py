"""The lmms-eval judge prompts of the VDD and VDC tasks: render them, read them back, parse replies.

- vdd (video detail description): one call; the judge scores the predicted answer against the
  correct answer, 0-5.
- vdc (video detailed captioning): two stages per question of the item's `qa`. Stage 1
  ("vdc_answer") the judge answers the question from the predicted caption only; stage 2
  ("vdc_score") it scores that answer against the question's correct answer, 0-5. The item's
  score is the mean over its questions.

The prompt texts are data copied verbatim from lmms-eval (EvolvingLMMs-Lab/lmms-eval at commit
75571cf); only the f-string fields became `str.format` fields, so the rendered text is the same.
Change a text and you must bump its TEMPLATE_VERSION: the version is part of the cache key.
"""

from __future__ import annotations

import ast
import math
import re
import string

TEMPLATES = ("vdd", "vdc")
# goes into the judgement cache key: bump it whenever a template's rendered text changes
TEMPLATE_VERSION = {
    "vdd": "vdd-1 lmms-eval@75571cf video_detail_description",
    "vdc": "vdc-1 lmms-eval@75571cf vdc",
}
SCORE_RANGE = (0.0, 5.0)
# the max_tokens lmms-eval asks for: VDD 64 (gpt_eval), VDC 256 (both sglang gen() calls)
MAX_TOKENS = {"vdd": 64, "vdc_answer": 256, "vdc_score": 256}

# lmms_eval/tasks/video_detail_description/utils.py, get_eval_generic()
VDD_SYSTEM = (
    "You are an intelligent chatbot designed for evaluating the detail orientation of generative "
    "outputs for video-based question-answer pairs. "
    "Your task is to compare the predicted answer with the correct answer and determine its level "
    "of detail, considering both completeness and specificity. Here's how you can accomplish the "
    "task:"
    "------"
    "##INSTRUCTIONS: "
    "- Check if the predicted answer covers all major points from the video. The response should "
    "not leave out any key aspects.\n"
    "- Evaluate whether the predicted answer includes specific details rather than just generic "
    "points. It should provide comprehensive information that is tied to specific elements of the "
    "video.\n"
    "- Consider synonyms or paraphrases as valid matches.\n"
    "- Provide a single evaluation score that reflects the level of detail orientation of the "
    "prediction, considering both completeness and specificity."
)
VDD_USER = (
    "Please evaluate the following video-based question-answer pair:\n\n"
    "Question: {question}\n"
    "Correct Answer: {reference}\n"
    "Predicted Answer: {answer}\n\n"
    "Provide your evaluation only as a detail orientation score where the detail orientation "
    "score is an integer value between 0 and 5, with 5 indicating the highest level of detail "
    "orientation. "
    "Please generate the response in the form of a Python dictionary string with keys 'score', "
    "where its value is the detail orientation score in INTEGER, not STRING."
    "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only provide the Python dictionary "
    "string. "
    "For example, your response should look like this: {{'score': 4.8}}."
)

# lmms_eval/tasks/vdc/utils.py, gener_pred_response() (stage 1)
VDC_ANSWER_SYSTEM = (
    "You are an intelligent chatbot designed for providing accurate answers to questions related "
    "to the content based on a detailed description of a video or image."
    "Here's how you can accomplish the task:"
    "------"
    "##INSTRUCTIONS: "
    "- Read the detailed description carefully.\n"
    "- Answer the question only based on the detailed description.\n"
    "- The answer should be a short sentence or phrase.\n"
)
VDC_ANSWER_USER = (
    "Please provide accurate answers to questions related to the content based on a detailed "
    "description of a video or image:\n\n"
    "detailed description: {caption}, question: {question}"
    "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only provide short but accurate answer."
)

# lmms_eval/tasks/vdc/utils.py, gener_pred_score() (stage 2)
VDC_SCORE_SYSTEM = (
    "You are an intelligent chatbot designed for evaluating the correctness of generative outputs "
    "for question-answer pairs. "
    "Your task is to compare the predicted answer with the correct answer and determine if they "
    "match meaningfully. Here's how you can accomplish the task:"
    "------"
    "##INSTRUCTIONS: "
    "- Focus on the meaningful match between the predicted answer and the correct answer.\n"
    "- Consider synonyms or paraphrases as valid matches.\n"
    "- Evaluate the correctness of the prediction compared to the answer."
)
VDC_SCORE_USER = (
    "Please evaluate the following video-based question-answer pair:\n\n"
    "Question: {question}\n"
    "Correct Answer: {reference}\n"
    "Predicted Answer: {answer}\n\n"
    "Provide your evaluation only as a yes/no and score where the score is an integer value "
    "between 0 and 5, with 5 indicating the highest meaningful match. "
    "Please generate the response in the form of a Python dictionary string with keys 'pred' and "
    "'score', where value of 'pred' is  a string of 'yes' or 'no' and value of 'score' is in "
    "INTEGER, not STRING."
    "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only provide the Python dictionary "
    "string. "
    "For example, your response should look like this: {{'pred': 'yes', 'score': 4.8}}."
)

# stage -> (system text, user format string): every kind of chat request a judge receives
STAGES = {
    "vdd": (VDD_SYSTEM, VDD_USER),
    "vdc_answer": (VDC_ANSWER_SYSTEM, VDC_ANSWER_USER),
    "vdc_score": (VDC_SCORE_SYSTEM, VDC_SCORE_USER),
}


class BadReply(ValueError):
    """The judge's reply holds no usable score."""


def render(stage: str, **fields: str) -> list[dict]:
    """The chat messages of one judge request of `stage` (a key of STAGES)."""
    system, user = STAGES[stage]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user.format(**fields)},
    ]


def vdd_messages(question: str, reference: str, answer: str) -> list[dict]:
    return render("vdd", question=question, reference=reference, answer=answer)


def vdc_answer_messages(caption: str, question: str) -> list[dict]:
    """Stage 1: answer `question` from the predicted `caption` only."""
    return render("vdc_answer", caption=caption, question=question)


def vdc_score_messages(question: str, reference: str, answer: str) -> list[dict]:
    """Stage 2: score stage 1's `answer` against the question's correct answer."""
    return render("vdc_score", question=question, reference=reference, answer=answer)


def _pattern(user: str) -> re.Pattern:
    """A regex matching the rendered `user` format string, one named group per field."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(user):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(f"(?P<{field}>.*?)")
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


_PATTERNS = {stage: _pattern(user) for stage, (_, user) in STAGES.items()}


def read_messages(messages: list[dict]) -> tuple[str, dict[str, str]] | None:
    """The inverse of render: (stage, fields) of a request's messages, None if no template's.

    Fields holding a template's own literal text (e.g. "\\nCorrect Answer: ") may split wrongly;
    only the embedded judge reads requests back, and its toy texts never do."""
    text = {m.get("role"): m.get("content") for m in messages}
    for stage, (system, _) in STAGES.items():
        if text.get("system") == system and isinstance(text.get("user"), str):
            if m := _PATTERNS[stage].match(text["user"]):
                return stage, m.groupdict()
    return None


def parse_score(reply: str) -> float:
    """The score of a judge reply such as "{'pred': 'yes', 'score': 4}", in [0, 5].

    Raises BadReply, never returns a stand-in 0: lmms-eval scores an unparseable reply 0, which
    would count a judge failure as a bad answer."""
    shown = reply if len(reply) <= 200 else reply[:200] + "..."
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        raise BadReply(f"judge reply {shown!r} holds no {{...}} dict")
    try:
        value = ast.literal_eval(reply[start : end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as err:
        raise BadReply(f"judge reply {shown!r} is not a Python dict literal ({err})") from None
    if not isinstance(value, dict) or "score" not in value:
        raise BadReply(f"judge reply {shown!r} has no 'score' key")
    score = value["score"]
    if isinstance(score, str):  # "4" despite "INTEGER, not STRING": the number is still clear
        try:
            score = float(score.strip())
        except ValueError:
            raise BadReply(f"judge reply {shown!r} has a score that is not a number") from None
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise BadReply(f"judge reply {shown!r} has a score that is not a number")
    low, high = SCORE_RANGE
    if not low <= score <= high:
        raise BadReply(f"judge reply {shown!r} has score {score}, outside the range [0, 5]")
    return float(score)
