"""EAGLE's drafter: a one-layer head that extrapolates the target's own features.

Entry j of the head reads fc([embedding of token j + 1, target feature f_j]) and, through one
decoder layer, predicts f_{j+1}; the target's own `lm_head` turns that into the next-token
distribution (EAGLE, Li et al. 2024, Section 3; release `model/cnets.py`: `fc` is
Linear(2H -> H) with bias, one Llama decoder layer). Features are the target's last-layer
states after its final norm, what its `lm_head` reads. Unlike EAGLE-1's release the head keeps
the Llama layer's input norm and a final norm (as EAGLE-3's does): its output then has the
scale of the post-norm features it regresses.

Drafting: a drafted node's entry pairs its token with the feature the head predicted for its
parent; when the target has verified a step, the drafted entries are dropped and the accepted
tokens are fed again with the target's true features (as the release does), so the head's
cache holds true features only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mmspec.decoding import catalog
from mmspec.decoding.component import Values
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters import tree_feed
from mmspec.decoding.drafters.trained import HEAD_LAYERS, HEAD_NOISE, HEAD_TRAINING, HeadDrafter
from mmspec.decoding.guidance import GuidedDecoder
from mmspec.decoding.lazy import inference_mode, torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT
from mmspec.decoding.timing import sync

if TYPE_CHECKING:
    from mmspec.decoding.drafters.eagle.net import EagleHead


@catalog.register
class EagleDrafter(HeadDrafter):
    """Drafts with an `EagleHead` over the target's features; the target's embedding and
    `lm_head` are shared (what the head's `Decoder` runs with).

    Under classifier-free guidance (a `GuidedDecoder` target: image generation) the head runs
    two rows, fed the target's conditional and unconditional features, and
    presents the guided distribution of its two read-outs, as the target does (LANTERN's
    drafter: EAGLE-2's head over LlamaGen, guided on both sides). Entries, predicted features
    and pending inputs carry a leading row dimension: one row, or those two.
    """

    name = "eagle"
    params = (*HEAD_TRAINING, HEAD_NOISE, HEAD_LAYERS)
    training = tuple(p.key for p in params)
    drafts_images = True
    network_class = "mmspec.decoding.drafters.eagle.net:EagleHead"
    loss_class = "mmspec.decoding.drafters.eagle.loss:FeatureLoss"
    description = "EAGLE's one-layer head extrapolating the target's last-layer features"
    source = "EAGLE's release, train/main.py (lr 3e-5, batch 4, noise 0.2)"

    @classmethod
    def from_spec(cls, spec: Values, *, target, draft=None, head=None, temperature: float = 0.0):
        return cls(head, target, temperature)

    def __init__(self, head: EagleHead, target: Decoder | GuidedDecoder, temperature: float):
        super().__init__(temperature)
        self.head = head
        self.guidance = target if isinstance(target, GuidedDecoder) else None
        inner = target.decoder if self.guidance is not None else target
        self.decoder = Decoder(head, parts=(head.model, inner.lm_head, inner.embed))
        self.embed = inner.embed
        self.q_temperature = temperature if temperature > 0 else 1.0
        # per row: (embeds [n, H], features [n, H]) of the entries to feed next
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.started = False
        self.out: dict[int, torch.Tensor] = {}  # node (ROOT too) -> predicted features [R, H]
        self.fed: list[int] = []
        self.first = 0  # head position of depth-1 nodes in the current proposal

    def _embed(self, tokens: list[int]) -> torch.Tensor:
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.decoder.device)
        return self.embed(ids)

    def _rows(self, target) -> list[torch.Tensor]:
        """The target's features per row of a `Forward` row: [n, H] each."""
        if self.guidance is None:
            return [target.hidden]
        return [target.hidden, target.unconditional]

    @inference_mode
    def start(self, prompts, first_token: int, target) -> None:
        """Queue one entry per prompt position and row: the next position's input embedding
        (the first token's after the last) with the target's prefill feature of this one.
        Unguided, `prompts` holds the target's prompt; guided, its (conditional,
        unconditional) pair, whose prefill left-padded the shorter row."""
        rows = [prompts[0].embeds] if self.guidance is None else list(prompts)
        first = self._embed([first_token])
        self.pending = [
            (torch.cat([embeds[1:].to(self.decoder.device), first]), features[-len(embeds) :])
            for embeds, features in zip(rows, self._rows(target), strict=True)
        ]
        self.started = False

    def _forward(self, vectors: torch.Tensor | list[torch.Tensor], **tree) -> torch.Tensor:
        """Feed entry vectors ([R, n, H], or [n, H] per row; timed); the predicted features
        [R, n, H] (at a prefill, of the last n positions of every row)."""
        start = time.perf_counter()
        if self.started:
            if isinstance(vectors, list):
                vectors = torch.stack(vectors)
            hidden = self.decoder.extend_vectors(vectors, **tree).hidden
        else:
            hidden = self.decoder.prefill(vectors).hidden
            self.started = True
        sync(self.decoder.device)
        self.forward_s += time.perf_counter() - start
        self.forwards += 1
        return hidden

    def _q(self, features: torch.Tensor) -> torch.Tensor:
        """The draft distribution(s) of predicted features [R, ..., H]."""
        logits = self.decoder.head_logits(features)
        if self.guidance is not None:
            logits = self.guidance.guide(logits[0], logits[1])
        else:
            logits = logits[0]
        return distribution(logits, self.q_temperature)

    @inference_mode
    def root(self, sampler) -> torch.Tensor:
        """Feed the queued entries (true features); the first drafted position's q."""
        vectors = [self.head.inputs(embeds, features) for embeds, features in self.pending]
        predicted = self._forward(vectors)[:, -1]  # [R, H]
        self.out, self.fed = {ROOT: predicted}, []
        self.first = self.decoder.length
        return self._q(predicted)

    @inference_mode
    def expand(self, tree, nodes: list[int]) -> torch.Tensor:
        """Feed `nodes` (each with its parent's predicted feature); q after each [n, V]."""
        features = torch.stack([self.out[tree.parents[n]] for n in nodes], dim=1)  # [R, n, H]
        embeds = self._embed([tree.tokens[n] for n in nodes]).expand(len(features), -1, -1)
        vectors = self.head.inputs(embeds, features)
        predicted = self._forward(vectors, **tree_feed(tree, nodes, self.fed, self.first))
        self.fed.extend(nodes)
        self.out.update(zip(nodes, predicted.transpose(0, 1), strict=True))
        return self._q(predicted)

    @inference_mode
    def commit(self, tree, path: list[int], next_token: int, target) -> None:
        """Drop the drafted entries; queue the accepted tokens and the next one, each with the
        target's feature of the position before it (in every row)."""
        self.decoder.truncate(self.first)
        embeds = self._embed([tree.tokens[i] for i in path] + [next_token])
        self.pending = [(embeds, features) for features in self._rows(target)]
