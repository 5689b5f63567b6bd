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
(Kangaroo's early exit is its `expand` returning None below its threshold); it stops the whole
proposal, and a node of a tree level without a continuation gets a row of zeros instead
(`Drafter.expand`).

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
from mmspec.decoding.component import Values
from mmspec.decoding.lazy import torch


class Drafter(component.Drafter):
    """The drafter protocol: what tree policies and the loop call. Subclasses implement
    `from_spec`, `start`, `root`, `expand` and `commit`, and declare themselves
    (`decoding.component`: name, params, requires)."""

    target_layers: tuple[int, ...] = ()  # target layers (besides the last) `commit` reads
    reads_tokens: bool = False  # `start` also gets the generation's `TokenContext`

    def __init__(self, temperature: float):
        self.temperature = temperature  # the drafting temperature its distributions are at
        self.weights = torch.ones(1)  # the block's ensemble weights [m] (recorded per step)
        self.forwards = 0  # draft forwards so far (T_q's count)
        self.forward_s = 0.0  # their time in seconds (T_q)

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        """The drafter, built once per job (before any generation) from its own spec, the
        values of the params it reads (nothing else), and: `target` the target's `Decoder`
        (model, `stack`, `lm_head`, `embed`, `head_logits`; image generation: a
        `GuidedDecoder` of the same interface, for a drafter declaring `drafts_images`), not
        a `Forward`; `draft` the draft model (a transformers model; None unless it requires
        `draft_model`); `head` the trained head (None unless it requires `trained_head`);
        `temperature` the drafting temperature (`trees.drafting_temperature`: the sampling
        temperature for a chain, 1 for trees, 0 when greedy). A drafter reading `views` also
        takes `weights`, the part of its ensemble's weight policy (None for one view)."""
        raise NotImplementedError(
            f"{cls.__qualname__} defines no from_spec(spec, *, target, draft, head, "
            "temperature): a drafter builds itself there (mmspec.api.Drafter)"
        )

    def start(self, prompts, first_token: int, target, tokens=None) -> None:
        """A new generation (a sample-turn), after the target's prefill. `prompts`: the
        drafter's prompt in each of its views (`Prompt`s, one cache row each), or `HeadPrompts`
        (the target's own prompt) for a drafter without views; `first_token`: the token the
        prefill emitted, which no cache holds yet; `target`: that prefill's `Forward` for the
        one row, not a `Decoder`: `logits` [V] (the last position's), `hidden` [L, H] (the last
        layer at every prompt position), `layers` {i: [L, H]} for `target_layers`;
        `tokens`: the generation's `TokenContext`, passed only when `reads_tokens`, whose
        `output` is `[first_token]` here."""
        raise NotImplementedError(f"{type(self).__qualname__} defines no start")

    def root(self, sampler) -> torch.Tensor | None:
        """Begin a proposal: q [V], the draft distribution of the first position after the
        last emitted token, or None to propose nothing this step (one autoregressive step).
        Every q a drafter returns is probabilities (non-negative, each row summing to one) at
        its drafting temperature (at 1 when that is 0), over the target's vocabulary (the last
        dimension of its logits), floating point of at least float32 (rejection sampling
        divides by q(x) as given, and a bfloat16 row sums to one only roughly; the engine's
        `distribution` gives float32, and keeps float64 logits float64, as `mmspec
        verify-lossless` needs), on the target's device (that of `target.logits` at `start`:
        a sampled chain's q is indexed beside the target's probabilities), every row of a
        proposal in one dtype and device (a chain stacks them). A token chosen
        deterministically is a one-hot q. `sampler`: the engine's `Sampler`, for a drafter's
        own random choices."""
        raise NotImplementedError(f"{type(self).__qualname__} defines no root")

    def expand(self, tree, nodes: list[int]) -> torch.Tensor | None:
        """q [len(nodes), V]: the draft distribution after each of `nodes` (nodes of `tree`, a
        `Proposal`, whose parents were expanded before), row j for `nodes[j]`, each node
        seeing its own ancestors only; or None, which stops the whole proposal there: the
        policy keeps the nodes grown so far (a chain ends, a static or SAGE tree stops at this
        level, a dynamic tree reranks what it grew). There is no None for one node: a node
        without a continuation gets a row of zeros, under which no tree policy takes a
        likely child: SAGE takes none (after its first step, EAGLE's static tree), EAGLE-2's
        dynamic tree ranks them last (kept only once every other candidate is), a static tree
        still adds its ranked nodes, which the target verifies like any other (a wasted node,
        never a wrong token). A chain asks for one node at a time, so it stops with None; it
        draws from the row at temperature > 0, so never give it zeros."""
        raise NotImplementedError(f"{type(self).__qualname__} defines no expand")

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """The target accepted `path` (node indices of `tree`, root to leaf; [] when none, or
        nothing was proposed) and emits `next_token` (its correction or bonus token). `target`
        is the verification's `Forward` at the root and at each accepted node: `logits`
        [1 + len(path), V], `hidden` [1 + len(path), H], `layers` likewise; row 0 is the
        position of the last token emitted before this step. With `reads_tokens`, the
        context's `output` already ends with the accepted tokens and `next_token`."""
        raise NotImplementedError(f"{type(self).__qualname__} defines no commit")


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
