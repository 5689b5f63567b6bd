"""The generation as token ids: what a drafter that reads tokens sees (`Drafter.reads_tokens`).

Drafters that draft from text (prompt lookup, n-gram, retrieval, suffix drafters) need the ids
the target reads, where its visual tokens are, every token committed so far and the tokenizer.
The prompt's ids come from where they are known (`Prompt.ids`, set by the family's prompt
builder or by `views.embed_with_images`), never from embeddings. `Speculation` builds one
context per generation and keeps its `output` current; nothing is built for other drafters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmspec.decoding.lazy import torch
from mmspec.decoding.prompt import Prompt


@dataclass
class TokenContext:
    """prompt [L] long: the ids the target reads (CPU), a visual position holding its
    placeholder's id (the family's image or video token); visual [L] bool; spans: the runs of
    visual positions as (start, end) with end exclusive, in order; output: every token committed
    so far (the prefill's first token, then each step's accepted tokens and next token), which
    the loop extends before it calls the drafter's `commit` (read it, never change it);
    tokenizer: the target's tokenizer (None where the caller has none)."""

    prompt: torch.Tensor
    visual: torch.Tensor
    spans: list[tuple[int, int]]
    tokenizer: object = None
    output: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, prompt: Prompt, tokenizer, first_token: int) -> TokenContext:
        """The context of a generation of `prompt` whose prefill emitted `first_token`."""
        if getattr(prompt, "ids", None) is None:
            raise ValueError(
                "this drafter reads token ids, and the target's prompt carries none (a prompt "
                "built from bare embeddings; build it with its tokenizer: views.full_prompt)"
            )
        visual = prompt.visual.to(torch.bool).cpu()
        return cls(prompt.ids.cpu(), visual, visual_spans(visual), tokenizer, [first_token])

    def __deepcopy__(self, memo: dict) -> TokenContext:
        """A fork's copy (`mmspec verify-lossless`): its own output, the rest shared (read-only;
        a tokenizer is slow to copy)."""
        copied = TokenContext(self.prompt, self.visual, self.spans, self.tokenizer, [*self.output])
        memo[id(self)], memo[id(self.output)] = copied, copied.output  # a drafter's alias too
        return copied


def visual_spans(visual: torch.Tensor) -> list[tuple[int, int]]:
    """The runs of True in a [L] bool mask, as (start, end) with end exclusive."""
    flags = visual.to(torch.bool).cpu().tolist()
    spans, start = [], None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(flags)))
    return spans
