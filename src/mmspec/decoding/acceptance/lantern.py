"""LANTERN's relaxed acceptance (lossy): a drafted image token also counts the target's mass on
its nearest neighbours in the VQ codebook's latent space, within a divergence bound delta.

Notation here: p is the target's distribution, q the draft's (the paper swaps the letters).
For a drafted token x:
- B_k(x): x and the k codes nearest to it, nearest first (`Neighbours`; `proximity` l2, cosine
  or random). k counts the neighbours besides x, as LANTERN's release does (its table drops the
  diagonal; the paper's B_k counts x among its k).
- A_{k,delta}(x): x and the longest prefix of its neighbours whose merge into x keeps the
  divergence between the distorted target p' and p within delta (`divergence` tvd, or jsd in
  bits). p' moves the mass of A onto x: p'(x) = p(A), p'(a) = 0 for the rest of A, p elsewhere.
  Its TVD from p is the moved mass, so the prefix grows while that stays <= delta (the release's
  comparison).

The rules (paper Section 3.3 and Appendix B):
- greedy: a node passes when its token is the argmax of its p' (the correction is p's argmax);
  the accepted path is the longest run of passing nodes from the root over every root-to-leaf
  path of the proposal, as the release takes it (models/ea_model_llamagen.py:893-903), ties to
  the path whose leaf comes first in proposal order (the release's first row of
  `retrieve_indices`, whose rows list leaves in node order; torch.argmax takes the first);
- a chain drawn from q: accept x with probability min(1, p(A) / q(x)); at the first rejection
  emit a token from norm(max(0, p' - q)), the paper's residual. (The release subtracts instead a
  q zeroed on x's k + 1 nearest codes from the undistorted p.) A fully accepted chain ends with
  a bonus token from the next p;
- deterministic candidates (every tree, greedy drafts): each child is a point mass, accepted with
  probability p(A); after a rejection p <- p with A zeroed, renormalised (the residual
  norm(max(0, p' - point mass)) of the same rule; `lantern_sibling_mask: merged`, the default).
  With `lantern_sibling_mask: release` a rejected x zeroes x and, when its merge took any
  neighbour, its k + 1 nearest codes, merged or not (the release's
  models/ea_model_llamagen.py:769-779; a uniform p over the vocabulary when nothing is left).
  The release counts a neighbour of zero mass as merged even at delta 0, so that mask removes
  mass at delta 0 too: only `merged` is lossless there.

How the output relates to the target's: at delta = 0 (with the default sibling mask) or k = 0,
A = {x} and every rule is the lossless one it extends, draw for draw (tests check it, and the
exact output distribution by enumeration). For delta > 0, delta bounds how far each distorted
target p' lies from p (the paper's bound, given the drafted token); the emitted tokens'
distribution is not bounded by it, so quality is measured (FID, CLIP score), not guaranteed.

Each step reports its relaxed tokens (the cells table's `relaxed_share`): those the lossless rule
would have rejected where LANTERN accepted them. Greedy: an accepted child other than the
target's argmax. Sampling: an accepted token whose coin, the same draw, fell at or above the
lossless acceptance probability (p(x) / q(x) on a chain, p(x) for a point mass); the grading
reads the draw LANTERN flips anyway, so counting changes nothing it decides.
"""

from __future__ import annotations

import math
from itertools import takewhile

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.rule import Rule
from mmspec.decoding.acceptance.sampling import _accept_point_masses, _residual
from mmspec.decoding.component import CODEBOOK, NUMBER, Param, TargetFacts, Values
from mmspec.decoding.lazy import torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT, Proposal

PROXIMITIES = ("l2", "cosine", "random")  # latent neighbours: Euclidean, cosine, random control
DIVERGENCES = ("tvd", "jsd")  # the bound delta is on TVD, or on JSD in bits
SIBLING_MASKS = ("merged", "release")  # what a rejected point mass removes before its sibling

CHUNK = 1024  # codebook rows per distance block: memory O(CHUNK x codes), not codes^2


class Neighbours:
    """The k nearest other codes of every code of a VQ codebook [codes, dim], nearest first, as
    vocabulary ids: code c is token `offset + c` of the language model's vocabulary. `spare`
    more columns (as many as the codebook has) serve the release's sibling mask, which zeroes
    k + 1 of them."""

    def __init__(
        self,
        codebook: torch.Tensor,
        offset: int,
        k: int,
        proximity: str,
        seed: int = 0,
        spare: int = 0,
    ):
        codes = codebook.shape[0]
        if proximity not in PROXIMITIES:
            raise ValueError(f"unknown proximity {proximity!r}; known: {list(PROXIMITIES)}")
        if not 0 <= k < codes:
            raise ValueError(
                f"lantern_k must be in [0, {codes - 1}] (the codebook's other codes), got {k}"
            )
        self.offset, self.codes, self.k = offset, codes, k
        width = min(k + spare, codes - 1)
        self.table = nearest_codes(codebook.float(), width, proximity, seed) + offset

    def _row(self, token: int) -> torch.Tensor | None:
        code = token - self.offset
        return self.table[code] if 0 <= code < self.codes else None

    def of(self, token: int) -> torch.Tensor | None:
        """The neighbours of `token` (vocabulary ids, nearest first); None for a non-image token."""
        row = self._row(token)
        return None if row is None else row[: self.k]

    def nearest(self, token: int, n: int) -> torch.Tensor | None:
        """Up to `n` nearest neighbours of `token`, within the table's columns."""
        row = self._row(token)
        return None if row is None else row[:n]


def nearest_codes(codebook: torch.Tensor, k: int, proximity: str, seed: int = 0) -> torch.Tensor:
    """[codes, k] indices of each code's k nearest other codes (l2: Euclidean distance; cosine:
    similarity; random: a seeded random order, the paper's control), nearest first."""
    codes = codebook.shape[0]
    out = torch.empty(codes, k, dtype=torch.long)
    if k == 0:
        return out
    if proximity == "random":
        g = torch.Generator().manual_seed(seed)
        for c in range(codes):
            others = torch.randperm(codes - 1, generator=g)[:k]
            out[c] = others + (others >= c).long()  # skip c itself
        return out
    unit = torch.nn.functional.normalize(codebook, dim=-1) if proximity == "cosine" else None
    for start in range(0, codes, CHUNK):
        rows = slice(start, min(start + CHUNK, codes))
        if unit is None:
            far = torch.cdist(codebook[rows], codebook)
        else:
            far = -(unit[rows] @ unit.T)  # most similar first
        far[torch.arange(far.shape[0]), torch.arange(rows.start, rows.stop)] = math.inf
        out[rows] = far.topk(k, dim=-1, largest=False).indices  # ties: lower index first
    return out


def relaxed_set(p: torch.Tensor, token: int, neighbours: Neighbours, delta: float, divergence):
    """A_{k,delta}(token) under the target distribution p [V]: (its ids, p(A))."""
    near = neighbours.of(token)
    own = p[token]
    if near is None or len(near) == 0 or delta <= 0:
        return torch.tensor([token]), own
    mass, cost = _costs(p, token, near, divergence)
    n = int((cost <= delta).int().cumprod(0).sum())  # the longest prefix within the bound
    kept = torch.cat([torch.tensor([token]), near[:n].cpu()])
    return kept, own + (mass[n - 1] if n else 0.0)


def _costs(p: torch.Tensor, token: int, near: torch.Tensor, divergence: str):
    """(moved mass, divergence) of merging each prefix of `near` into `token`."""
    mass = p[near].cumsum(0)
    if divergence == "tvd":
        return mass, mass
    # JSD(p', p) in bits: x gains the moved mass, each merged neighbour loses its own
    return mass, _jsd_term(p[token] + mass, p[token]) + 0.5 * mass


def merges_any(p: torch.Tensor, token: int, neighbours: Neighbours, delta: float, divergence):
    """Whether the release counts a neighbour merged into `token`: its nearest neighbour's move
    keeps the divergence within delta, a neighbour of zero mass included even at delta 0 (the
    release's `indices != -1`, models/ea_model_llamagen.py:744-758 and 771-773)."""
    near = neighbours.of(token)
    if near is None or len(near) == 0:
        return False
    return bool(_costs(p, token, near[:1], divergence)[1][0] <= delta)


def _jsd_term(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One entry's contribution to JSD in bits, 0.5 [a log2(2a/(a+b)) + b log2(2b/(a+b))]."""
    m = (a + b) / 2
    left = torch.where(a > 0, a * torch.log2(a / m), torch.zeros_like(a))
    right = torch.where(b > 0, b * torch.log2(b / m), torch.zeros_like(b))
    return 0.5 * (left + right)


def distorted(p: torch.Tensor, kept: torch.Tensor, mass) -> torch.Tensor:
    """p' of a relaxed set `kept` (its first id the drafted token) carrying mass p(A)."""
    out = p.clone()
    out[kept.to(p.device)] = 0
    out[int(kept[0])] = mass
    return out


def accept_lantern(
    proposal: Proposal,
    logits: torch.Tensor,
    temperature,
    sampler,
    *,
    lantern_k: int,
    lantern_delta: float,
    proximity: str,
    divergence: str,
    neighbours: Neighbours,
    lantern_sibling_mask: str = "merged",
):
    """The accepted path and next token under LANTERN (see the module docstring).

    `lantern_k` and `proximity` are those `neighbours` was built with (the runner builds the table
    from the method's values); the rule reads only the table and delta."""
    relax = _Relax(neighbours, lantern_delta, divergence, lantern_sibling_mask)
    if temperature == 0:
        return _greedy(proposal, logits, relax)
    p_rows = distribution(logits, temperature)
    if proposal.q is not None:
        return _drawn_chain(proposal, p_rows, sampler, relax)
    return _accept_point_masses(proposal, p_rows, sampler, relax.point_mass)


class _Relax:
    def __init__(
        self, neighbours: Neighbours, delta: float, divergence: str, sibling_mask: str = "merged"
    ):
        if sibling_mask not in SIBLING_MASKS:
            raise ValueError(
                f"unknown lantern_sibling_mask {sibling_mask!r}: {list(SIBLING_MASKS)}"
            )
        self.neighbours, self.delta, self.divergence = neighbours, delta, divergence
        self.sibling_mask = sibling_mask

    def __call__(self, p: torch.Tensor, token: int):
        return relaxed_set(p, token, self.neighbours, self.delta, self.divergence)

    def point_mass(self, p: torch.Tensor, token: int):
        """(acceptance probability, residual after a rejection) of a point-mass candidate: p(A)
        and p with A zeroed, renormalised (p itself when A had no mass to remove); with the
        release's sibling mask, p with x and (when it merged any) x's k + 1 nearest codes
        zeroed, uniform when nothing is left."""
        kept, mass = self(p, token)
        if self.sibling_mask == "release":
            return float(mass), self._release_residual(p, token)
        kept = kept.to(p.device)
        if not bool((p[kept] > 0).any()):
            return float(mass), p
        rest = p.clone()
        rest[kept] = 0
        return float(mass), rest / rest.sum()

    def _release_residual(self, p: torch.Tensor, token: int) -> torch.Tensor:
        rest = p.clone()
        rest[token] = 0
        if merges_any(p, token, self.neighbours, self.delta, self.divergence):
            rest[self.neighbours.nearest(token, self.neighbours.k + 1).to(p.device)] = 0
        total = rest.sum()
        return rest / total if total > 0 else torch.full_like(p, 1.0 / len(p))


def _greedy(proposal: Proposal, logits: torch.Tensor, relax: _Relax):
    """The longest run of passing nodes from the root over every root-to-leaf path (ties: the
    path whose leaf comes first), then the target's argmax after it. A node passes when it is
    the argmax of its distorted target; one whose relaxed set is itself alone is compared with
    the logits' argmax, as the greedy rule does (so delta 0 is that rule)."""
    target = logits.argmax(dim=-1).tolist()
    p_rows = torch.softmax(logits.float(), dim=-1)
    reached: list[bool] = []  # every node from the root to this one passes
    for node, token in enumerate(proposal.tokens):
        parent = proposal.parents[node]
        if parent != ROOT and not reached[parent]:
            reached.append(False)
            continue
        p = p_rows[parent + 1]
        kept, mass = relax(p, token)
        if len(kept) == 1:
            reached.append(token == target[parent + 1])
        else:
            reached.append(int(distorted(p, kept, mass).argmax()) == token)
    best: list[int] = []
    for leaf in _leaves(proposal):  # a longer run replaces the best; a tie keeps the first
        run = list(takewhile(reached.__getitem__, [*reversed(proposal.ancestors(leaf)), leaf]))
        if len(run) > len(best):
            best = run
    node = best[-1] if best else ROOT
    # relaxed: an accepted node other than its target's argmax
    relaxed = sum(proposal.tokens[n] != target[proposal.parents[n] + 1] for n in best)
    return best, target[node + 1], relaxed


def _leaves(proposal: Proposal) -> list[int]:
    """Nodes without children, in proposal order."""
    parents = set(proposal.parents)
    return [n for n in range(len(proposal.tokens)) if n not in parents]


def _drawn_chain(proposal: Proposal, p_rows: torch.Tensor, sampler, relax: _Relax):
    """A chain drawn from q: min(1, p(A_i) / q_i(x_i)) as one vector and one comparison, as the
    lossless rule flips its coins, then the residual of the distorted target at the first
    rejection. An accepted token is relaxed when its coin fell at or above p(x_i) / q_i(x_i),
    where the lossless rule would have rejected it."""
    if not proposal.is_chain:
        raise ValueError("draws from q are verified only on chains; trees are point masses")
    n = len(proposal.tokens)
    q = proposal.q.to(p_rows.dtype)
    sets = [relax(p_rows[i], token) for i, token in enumerate(proposal.tokens)]
    mass = torch.stack([torch.as_tensor(m, dtype=p_rows.dtype) for _, m in sets]).to(p_rows.device)
    tokens = proposal.tokens_tensor(p_rows.device)
    rows = torch.arange(n, device=p_rows.device)
    drafted = q[rows, tokens]
    exact = (p_rows[rows, tokens] / drafted).clamp(max=1.0)
    k, relaxed = sampler.graded_first_rejection(exact, (mass / drafted).clamp(max=1.0))
    if k == n:
        return list(range(n)), sampler.categorical(p_rows[n]), relaxed
    kept, m = sets[k]
    residual = _residual(distorted(p_rows[k], kept, m), q[k])
    return list(range(k)), sampler.categorical(residual), relaxed


K = Param(
    "lantern_k",
    int,
    1000,
    "latent neighbours of a code",
    low=0,
    hint="0: no neighbours, lossless",
)

DELTA = Param(
    "lantern_delta",
    NUMBER,
    0.1,
    "the bound on the divergence",
    low=0,
    high=1,
    meaning="bounds a divergence (TVD, or JSD in bits)",
)

PROXIMITY = Param("proximity", str, "l2", "how neighbours are found", choices=PROXIMITIES)

SIBLING_MASK = Param(
    "lantern_sibling_mask",
    str,
    "merged",
    "what a rejected point-mass candidate removes before its next sibling",
    choices=SIBLING_MASKS,
)


@catalog.register
class Lantern(Rule):
    """LANTERN's relaxed acceptance over the target's VQ codebook (decoding.acceptance.lantern).
    Defaults from its release (generate_images.py: k 1000 of LlamaGen's 16384 codes, delta 0.1;
    l2 proximity and TVD as the paper's main setting, Section 4.1). k counts a token's
    neighbours besides itself; a toy codebook scales it down. Greedy takes the longest accepted
    path, as the release (models/ea_model_llamagen.py:893-903). `lantern_sibling_mask`: after a
    rejected point-mass candidate, `merged` zeroes its relaxed set A (lossless at delta 0),
    `release` zeroes x and its k + 1 nearest codes as the release does (:769-773)."""

    name = "lantern"
    params = (
        K,
        DELTA,
        PROXIMITY,
        Param("divergence", str, "tvd", "what delta bounds", choices=DIVERGENCES),
        SIBLING_MASK,
    )
    requires = frozenset({CODEBOOK})
    source = (
        "LANTERN's release, generate_images.py (k 1000 of 16384 codes, delta 0.1); the sibling "
        "mask is mmspec's (merged: exactly lossless at delta 0), the release's an option"
    )
    judge = staticmethod(accept_lantern)

    @classmethod
    def lossless_with(cls, params: Values) -> bool:
        if params.of(K) == 0:
            return True
        # the release's sibling mask removes mass at delta 0 too (zero-mass neighbours merge)
        return params.of(DELTA) == 0 and params.of(SIBLING_MASK) == "merged"

    @classmethod
    def check_target(cls, spec: Values, target: TargetFacts) -> None:
        if target.codes is not None and spec.of(K) >= target.codes:
            raise ValueError(
                f"lantern_k {spec.of(K)} must be below the {target.codes} codes of "
                f"{target.ref!r}'s codebook (k counts a code's neighbours besides itself)"
            )

    @classmethod
    def from_spec(cls, spec: Values, codebook=None) -> Rule:
        if codebook is None:
            raise ValueError(
                f"acceptance {cls.name!r} relaxes over the target's VQ codebook, and this target "
                "has none (an image-generating target with a VQ tokenizer is needed)"
            )
        rule = super().from_spec(spec)
        vectors, offset = codebook
        spare = 1 if spec.of(SIBLING_MASK) == "release" else 0  # k + 1 masked
        neighbours = Neighbours(vectors, offset, spec.of(K), spec.of(PROXIMITY), spare=spare)
        rule.params = {**rule.params, "neighbours": neighbours}
        return rule
