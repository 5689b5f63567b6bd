"""A drafter with no model: prompt lookup decoding.

It looks for the last n tokens of the generation (the prompt, then every committed token; the
longest n from `max_ngram` down to `min_ngram`) earlier in it, and proposes what followed their
latest earlier occurrence (Saxena 2023; transformers' `prompt_lookup_num_tokens`). It reads
token ids, not embeddings (`reads_tokens`), and proposes nothing when no n-gram recurs. Visual
tokens are barriers: a match never covers one and a copy stops before one, so the image token
id repeated over an image's positions neither matches nor gets copied.

Its choice is deterministic, so each position's draft distribution is a point mass (one-hot q):
greedy verification accepts it when it is the target's argmax, rejection sampling with
probability p(x) (and draws from p without x after a rejection), so the output stays the
target's. Chains only.
"""

from __future__ import annotations

import torch

from mmspec.api import Drafter, Param, Values
from mmspec_example.ngram import NgramIndex

BARRIER = -1  # a visual position in the n-gram index
MAX_NGRAM = Param("max_ngram", int, 3, "the longest n-gram it looks up", low=1)
MIN_NGRAM = Param("min_ngram", int, 1, "the shortest n-gram it looks up", low=1)


class PromptLookupDrafter(Drafter):
    """Copies the continuation of the generation's last n-gram from earlier in it."""

    name = "prompt_lookup"
    params = (MAX_NGRAM, MIN_NGRAM)
    requires = frozenset()  # nothing but the target: no draft model, views or trained head
    reads_tokens = True
    description = "copies what followed the last n-gram's earlier occurrence (no model)"
    source = "prompt lookup decoding (Saxena 2023); transformers' default max n-gram 3"

    @classmethod
    def check(cls, spec: Values) -> None:
        low, high = spec.of(MIN_NGRAM), spec.of(MAX_NGRAM)
        if low > high:
            raise ValueError(f"min_ngram={low} must not exceed max_ngram={high}")
        if spec.tree != "chain":
            raise ValueError("drafter 'prompt_lookup' copies one continuation (tree: chain)")

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(int(spec.of(MIN_NGRAM)), int(spec.of(MAX_NGRAM)), temperature)

    def __init__(self, min_ngram: int, max_ngram: int, temperature: float):
        super().__init__(temperature)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram

    def start(self, prompts, first_token: int, target, tokens) -> None:
        """Index the prompt (visual positions as barriers); the output joins at each `root`."""
        self.tokens = tokens
        ids, visual = tokens.prompt.tolist(), tokens.visual.tolist()
        self.index = NgramIndex(self.min_ngram, self.max_ngram)
        self.index.extend([BARRIER if v else t for t, v in zip(ids, visual, strict=True)])
        self.prompt_length = len(ids)
        self.vocab, self.device = target.logits.shape[-1], target.logits.device
        self.at: int | None = None

    def root(self, sampler) -> torch.Tensor | None:
        """Index the tokens committed since the last proposal, then look the suffix up."""
        output = self.tokens.output
        self.index.extend(output[len(self.index.tokens) - self.prompt_length :])
        self.at = self.index.match()
        return self._copied(0)

    def expand(self, tree, nodes: list[int]) -> torch.Tensor | None:
        """The copy's next token after the chain's node (None where the copy ends)."""
        q = self._copied(len(tree.ancestors(nodes[0])) + 1)
        return None if q is None else q[None]

    def _copied(self, depth: int) -> torch.Tensor | None:
        """A point mass on the copy's token at `depth` (0: the first), None past its end."""
        if self.at is None or self.at + depth >= len(self.index.tokens):
            return None
        token = self.index.tokens[self.at + depth]
        if not 0 <= token < self.vocab:  # a barrier (or an id the target cannot emit)
            return None
        q = torch.zeros(self.vocab, device=self.device)
        q[token] = 1.0
        return q

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """Nothing to keep: the token context's `output` holds the committed tokens."""
