"""`ModelDrafter`: a draft model drafting from one or more views of the prompt.

How it drafts is `DecoderDrafter`'s, which drafts with any `Decoder` (a draft model, or a stack
with the target's interface: Kangaroo's shallow sub-network); `ModelDrafter` declares the
component `model` over it (views, weight policy, a draft model). One batched forward per
expansion (parameters shared, one KV-cache row per view, left padding masked). The views'
next-token distributions are mixed with the weights the block's policy picked; with one view
this is plain single-view drafting (the mixture is the view's own distribution).

Its cache always holds the committed text except the `pending` tokens, which are fed at the start
of the next proposal (the target's correction/bonus token, plus accepted draft tokens that were
never fed, such as the last one of a fully accepted chain).
"""

from __future__ import annotations

import time

from mmspec.decoding import catalog
from mmspec.decoding.component import DRAFT_MODEL, Param, Values
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import Drafter, tree_feed
from mmspec.decoding.guidance import GuidedDecoder
from mmspec.decoding.lazy import torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT
from mmspec.decoding.timing import sync
from mmspec.decoding.views import parse_views
from mmspec.decoding.weights import History, StaticWeights, mix, weight_grid

VIEWS = Param("views", str, "M", "the views it drafts from, one letter each (an ensemble: 2+)")
WEIGHTS = Param("weights", str, "static", "the weight policy of an ensemble of views")


class DecoderDrafter(Drafter):
    """Drafts with a `Decoder` over m prompts (views), one cache row each, mixing their
    distributions with a weight policy's weights; counts its forwards and their time (T_q). It
    declares no component: a drafter class over it does (`ModelDrafter`, Kangaroo's)."""

    def __init__(self, decoder: Decoder, temperature: float, policy=None):
        """`decoder`: what it drafts with, one cache row per view (`Decoder(model)` over a draft
        model); `temperature`: the drafting temperature `from_spec` is given; `policy`: the
        weight policy of two or more views (`weights.build(vocab_size=...)`; None: static
        weights, all a single view needs)."""
        super().__init__(temperature)
        self.decoder = decoder  # what it drafts with: one cache row per view
        # Views' distributions are mixed as probabilities: at the sampling temperature, or at 1
        # for greedy drafting (argmax of the mixture, as in TABED's released code).
        self.mix_temperature = temperature if temperature > 0 else 1.0
        self.policy = policy or StaticWeights()
        self.history: History | None = None
        # the views' distributions [m, V] this proposal drafted from, keyed by the drafted node
        # they follow (ROOT: the first position); kept only for history-based weight policies
        self.view_probs: dict[int, torch.Tensor] = {}
        self.pending: list[int] = []
        self.base = 0  # cache length before the current proposal's pending tokens
        self.fed: list[int] = []  # drafted nodes in the cache, in feed order
        self.first = 0  # position of depth-1 nodes in the current proposal

    @property
    def views(self) -> int:
        """How many views it drafts from (its decoder's rows)."""
        return self.decoder.rows

    def start(self, prompts, first_token: int, target) -> None:
        """Prefill one cache row per view; the target's first token is fed with the first draft."""
        self.decoder.prefill(prompts)
        self.pending = [first_token]
        grid = weight_grid(len(prompts)) if self.policy.uses_grid else None
        self.history = History(self.policy.window, grid)

    def _forward(self, tokens: list[int], **tree) -> torch.Tensor:
        """Feed tokens to every view (timed); the views' logits [m, n, V]."""
        start = time.perf_counter()
        logits = self.decoder.extend(tokens, **tree).logits
        sync(self.decoder.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        return logits

    def _mixture(self, logits: torch.Tensor, after: list[int]) -> torch.Tensor:
        """The weighted mixtures [n, V] of the views' distributions (logits [m, n, V]) at the
        positions after drafted nodes `after` (ROOT: the first one), all in one batch."""
        probs = distribution(logits, self.mix_temperature)
        if self.policy.needs_history:
            self.view_probs.update((node, probs[:, j]) for j, node in enumerate(after))
        if self.views == 1:
            return probs[0]
        return mix(self.weights, probs)

    def root(self, sampler) -> torch.Tensor:
        """Pick the block's weights, feed the pending tokens; the first position's mixture."""
        self.weights = self.policy.choose(self.history, self.views, sampler).float()
        self.view_probs, self.fed = {}, []
        self.base = self.decoder.length
        logits = self._forward(self.pending)[:, -1:]
        self.first = self.decoder.length
        return self._mixture(logits, [ROOT])[0]

    def expand(self, tree, nodes: list[int]) -> torch.Tensor:
        """Feed `nodes` of `tree` in one batched forward; the mixture after each [n, V]."""
        tokens = [tree.tokens[n] for n in nodes]
        logits = self._forward(tokens, **tree_feed(tree, nodes, self.fed, self.first))
        self.fed.extend(nodes)
        return self._mixture(logits, nodes)

    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """Keep the accepted path in the cache, queue what it lacks, and update the history.

        The history gains the positions after the root and after each accepted node that was
        drafted from (the accepted positions and the first rejected one).
        """
        offset = {node: i for i, node in enumerate(self.fed)}
        drafted = [tree.drafted_index(i) for i in path]
        cached = [offset[d] for d in drafted if d in offset]
        n_pending = len(self.pending)
        self.decoder.keep(self.base, list(range(n_pending)) + [n_pending + o for o in cached])
        never_fed = zip(path, drafted, strict=True)
        self.pending = [tree.tokens[i] for i, d in never_fed if d not in offset]
        self.pending.append(next_token)
        if self.view_probs:
            rows = []
            for row, node in enumerate([ROOT, *drafted]):
                if node not in self.view_probs:
                    break  # the last accepted node of a fully accepted proposal: never fed
                rows.append((row, node))
            p = distribution(target.logits[[r for r, _ in rows]], self.mix_temperature)
            self.history.observe(p, torch.stack([self.view_probs[n] for _, n in rows]))


@catalog.register
class ModelDrafter(DecoderDrafter):
    """The component `model`: a draft model over m views, as a `DecoderDrafter` drafts.

    A drafter of your own that drafts with the draft model from the views (`views: M`, `T`, an
    ensemble `MT` with its weight policy) subclasses it: its views, their prompts and the
    weight policy come with it. Declare your own parameters beside its own, `params =
    (*ModelDrafter.params, Param("confidence", float, 0.5, "..."))` (`reads` returns them with
    the views'), and build in `from_spec` by calling this one and setting what is yours:
    `drafter = super().from_spec(spec, **context); drafter.confidence = spec.of(CONFIDENCE)`.
    It requires `DRAFT_MODEL`; a view's own requirements (view M's `DRAFT_VISUAL`, the draft's
    visual cache) come with the views chosen. A drafter with no views (over a model of its own,
    or the target's layers) subclasses `DecoderDrafter` instead and gets the target's prompt."""

    name = "model"
    params = (VIEWS, WEIGHTS)
    requires = frozenset({DRAFT_MODEL})
    drafts_images = True  # over a guided draft generator sharing the target's codes
    description = "a draft model sharing the target's tokenizer, over one view or an ensemble"

    @classmethod
    def reads(cls, spec: Values) -> tuple[Param, ...]:
        """Its views, each view's parameters, and for an ensemble its weight policy's; a
        subclass's own parameters too."""
        letters = parse_views(spec.of(VIEWS))
        own = [p for p in cls.params if p not in (VIEWS, WEIGHTS)]
        read = [*own, VIEWS, *(p for v in letters for p in catalog.get("view", v).params)]
        if len(letters) > 1:
            read += [WEIGHTS, *catalog.get("weights", spec.of(WEIGHTS)).params]
        return tuple(dict.fromkeys(read))

    @classmethod
    def check(cls, spec: Values) -> None:
        views = spec.of(VIEWS)
        known = "".join(catalog.components("view"))
        if not views or set(views) - set(known) or len(set(views)) != len(views):
            raise ValueError(f"views={views!r}: one or more distinct letters of {known}")
        catalog.get("weights", spec.of(WEIGHTS))

    @classmethod
    def from_spec(
        cls,
        spec: Values,
        *,
        target,
        draft=None,
        head=None,
        temperature: float = 0.0,
        weights=None,
    ):
        """`draft`: the draft model, or image generation's guided draft generator (one view, M,
        so no weight policy); `weights`: the part (`methods.spec.Part`) of an ensemble's weight
        policy, which it builds for the draft's vocabulary (one view: None)."""
        if isinstance(draft, GuidedDecoder):
            return cls(draft, temperature)
        vocab = draft.get_output_embeddings().out_features
        policy = None if weights is None else weights.build(vocab_size=vocab)
        return cls(Decoder(draft), temperature, policy)
