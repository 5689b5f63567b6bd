"""Drafters: what proposes candidate tokens for the target to verify.

A drafter is a small protocol that tree policies (decoding.trees) and the loop (decoding.loops)
call; how a proposal is shaped lives in the policies, never in a drafter:

- `start(prompts, first_token, target)`: a new generation. `prompts` holds the drafter's prompt
  (a `decoding.prompt.Prompt`: embeddings, visual mask, ids) in each of its views, one cache row
  each; a drafter without views (a head on the target's features, a drafter that reads tokens)
  gets `HeadPrompts`: the target's own prompt as the one item. `first_token` is the token the
  target's prefill emitted, `target` that prefill's `Forward` (logits [V], hidden states of
  every prompt position, plus the layers the drafter asks for in `target_layers`).
- `root(sampler) -> q [V] | None`: begin a proposal; the draft distribution of the first
  position, or None to propose nothing this step.
- `expand(tree, nodes) -> q [len(nodes), V] | None`: the draft distributions after each of
  `nodes` (nodes of `tree` whose parents were expanded before); each node sees its own
  ancestors. None stops the proposal: it keeps the nodes grown so far.
- `commit(tree, path, next_token, target)`: the target accepted `path` and emits `next_token`;
  `target` is the verification `Forward` at the root and each accepted node (logits, hidden
  states of the last layer and of `target_layers`): what a head on the target's features reads.

Tokens. A drafter that declares `reads_tokens = True` also gets `tokens`, a
`decoding.token_context.TokenContext`, as a fourth argument of `start`: the prompt's ids as the
target reads them (`prompt`, with `visual` and `spans` marking its visual tokens), every
committed token of the generation (`output`, extended by the loop before each `commit`) and the
target's tokenizer. Other drafters are called with three arguments and nothing is built for them.

Proposing nothing. A `root` of None makes every tree policy return an empty proposal: the target
verifies the last token alone and the rule emits the target's own next token (greedy: its
argmax; sampling: a draw from p), one autoregressive step (`Step.drafted` 0), and `commit` gets
an empty tree and path. An `expand` of None is the one way to stop early, in every policy
(Kangaroo's early exit is its `expand` returning None below its threshold).

Distributions are at the drafting temperature (`trees.drafting_temperature`: the sampling
temperature for a chain drawn from q; 1 for trees and when greedy); a drafter that chooses its
tokens deterministically (prompt lookup) returns a point mass (one-hot q), which the chain then
draws exactly and rejection sampling verifies as such. `weights` are the block's ensemble weights
(recorded per step), `forwards` and `forward_s` count draft forwards and their time (T_q).

A trained head on the target's features (EAGLE, DREAM, Medusa, ...) is one folder here: its
drafter (a `trained.HeadDrafter`), its network and its loss (a `head_loss.HeadLoss`); the
training loop (`training.heads`) and the stages stay as they are.
"""

from __future__ import annotations

from mmspec.decoding import component
from mmspec.lazy import torch


class Drafter(component.Drafter):
    """Defaults shared by every drafter; subclasses implement the four protocol methods and
    declare themselves (`decoding.component`: name, params, requires) and `from_spec`."""

    target_layers: tuple[int, ...] = ()  # target layers (besides the last) `commit` reads
    reads_tokens: bool = False  # `start` also gets the generation's `TokenContext`

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.weights = torch.ones(1)
        self.forwards = 0
        self.forward_s = 0.0

    @classmethod
    def from_spec(cls, spec: dict, *, target, draft=None, head=None, temperature: float = 0.0):
        """The drafter of its own spec (the values of the params it reads): `target` the
        target's `Decoder`, `draft` the draft model (drafters requiring one), `head` the trained
        head (drafters requiring one), `temperature` the drafting temperature
        (`trees.drafting_temperature`). A drafter over views also takes `weights`, the part
        of its ensemble's weight policy (None for one view)."""
        raise NotImplementedError

    def start(self, prompts, first_token: int, target, tokens=None) -> None:
        """`tokens`: the generation's `TokenContext`, passed only when `reads_tokens`."""
        raise NotImplementedError

    def root(self, sampler) -> torch.Tensor | None:
        raise NotImplementedError

    def expand(self, tree, nodes: list[int]) -> torch.Tensor | None:
        raise NotImplementedError

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        raise NotImplementedError


class HeadPrompts(list):
    """The `prompts` of a drafter without views (a head on the target's features, a drafter
    that reads tokens): the target's own `Prompt` as the one item, plus the attention each of
    its visual tokens received at the target's prefill when the method asked for it
    (`visual_attention`, else None; DREAM's visual token compression)."""

    def __init__(self, prompt, visual_attention=None):
        super().__init__([prompt])
        self.visual_attention = visual_attention


def tree_feed(tree, nodes: list[int], fed: list[int], first: int) -> dict:
    """How a drafter's cache is fed `nodes` of `tree` in one forward, as `Decoder.extend`
    options: nothing for the next link of a chain (plain causal), else each node sees only the
    fed nodes among its ancestors (`past` over the `fed` cached nodes, in feed order) and
    itself, at position `first` + its depth - 1."""
    ancestors = [tree.ancestors(n) for n in nodes]
    if len(nodes) == 1 and ancestors[0][::-1] == fed:
        return {}
    offset = {f: i for i, f in enumerate(fed)}
    rows, cols = [], []
    for j, chain in enumerate(ancestors):
        for a in chain:
            if a in offset:
                rows.append(j)
                cols.append(offset[a])
    past = torch.zeros(len(nodes), len(fed), dtype=torch.bool)
    past[rows, cols] = True
    return {
        "attention": torch.eye(len(nodes), dtype=torch.bool),
        "past": past,
        "positions": [first + len(a) for a in ancestors],
    }
