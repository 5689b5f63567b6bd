"""Ensemble weight policies (TABED): how much each view's draft distribution counts in a block.

A policy picks one weight vector per drafting block from the verified history. The history
holds, per verified position (the accepted ones and the first rejected one), what the policies
score from the target's distribution p and each view's distribution q_k there: KL(p || q_k),
TV(p, q_k), whether argmax q_k missed argmax p, and for the grid policy the argmax match and KL
of every candidate mixture. These are computed once, when the position is verified, from the
full distributions; a window h sums the last h positions (h = 0: all).
"""

from __future__ import annotations

import math
from itertools import combinations

from mmspec.decoding import catalog
from mmspec.decoding.component import NUMBER, Param, Values, WeightPolicy
from mmspec.decoding.lazy import torch

EPS = 1e-6


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dimension (0 log 0 = 0; q floored at 1e-30, so a token that both
    p and q give 0 adds 0: TABED's release, kl_div(q.log(), p), makes it NaN there)."""
    return (torch.xlogy(p, p) - p * q.clamp_min(1e-30).log()).sum(-1)


def weight_grid(m: int, steps: int = 10) -> torch.Tensor:
    """Every weight vector of m non-negative multiples of 1/steps summing to one [C, m]."""
    rows = []
    for bars in combinations(range(steps + m - 1), m - 1):  # stars and bars
        edges = (-1, *bars, steps + m - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(m)])
    return torch.tensor(rows, dtype=torch.float32) / steps


class History:
    """Per-position scores of each view (and grid candidate) against the target: for each
    verified position, `kl` and `tv` (the target's distribution from each view's, [m]), `err`
    (1 where a view's argmax is not the target's, [m]), and with a grid `grid_match` and
    `grid_kl` (per candidate mixture)."""

    def __init__(self, window: int, grid: torch.Tensor | None = None):
        self.window = window  # positions `sum` and `count` read (0: all of them)
        self.grid = grid  # candidate mixture weights [c, m] scored too, or None
        self.rows: list[dict[str, torch.Tensor]] = []  # one dict of scores per position

    def __len__(self) -> int:
        return len(self.rows)

    def observe(self, p: torch.Tensor, q: torch.Tensor) -> None:
        """Add positions: target distributions p [k, V] and view distributions q [k, m, V]."""
        p, q = p.float(), q.float()
        target = p.argmax(-1)
        pk = p.unsqueeze(1)
        stats = {
            "kl": kl(pk, q),
            "tv": 0.5 * (pk - q).abs().sum(-1),
            "err": (q.argmax(-1) != target.unsqueeze(1)).float(),
        }
        if self.grid is not None:
            mixtures = torch.einsum("cm,kmv->kcv", self.grid.to(q.device), q)
            stats["grid_match"] = (mixtures.argmax(-1) == target.unsqueeze(1)).float()
            stats["grid_kl"] = kl(pk, mixtures)
        for i in range(p.shape[0]):
            self.rows.append({key: value[i].cpu() for key, value in stats.items()})

    def sum(self, key: str) -> torch.Tensor:
        """The score `key` summed over the window's positions ([m], or [c] for a grid's)."""
        rows = self.rows[-self.window :] if self.window else self.rows
        return torch.stack([row[key] for row in rows]).sum(0)

    def count(self) -> int:
        """The positions the window holds."""
        return min(len(self.rows), self.window) if self.window else len(self.rows)


def uniform(m: int) -> torch.Tensor:
    return torch.full((m,), 1.0 / m)


WINDOW = Param(
    "window",
    int,
    0,
    "verified positions the history sums (the last `window`)",
    low=0,
    hint="0 = the whole history",
)


class Policy(WeightPolicy):
    """A weight policy: `choose` returns the block's weights [m], summing to one (non-negative
    except unclipped AdaBoost's). An adaptive policy reads the verified history over its last
    `window` positions."""

    needs_history = False  # whether it reads the history (else the drafter skips keeping it)
    uses_grid = False  # whether the history must score the 0.1-grid candidate mixtures
    window = 0  # verified positions of the history it reads (0: all of them)

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        """The weights [m] of the m views for the next drafting block, from the verified
        `history` (empty at a generation's start); `sampler` for a random policy's draws."""
        raise NotImplementedError(f"weight policy {self.name!r} defines no choose")

    @classmethod
    def from_spec(cls, spec: Values, vocab_size: int) -> Policy:
        """The policy of its own values; `vocab_size`: the draft's vocabulary."""
        return cls(**cls.arguments(spec))


class _Adaptive(Policy):
    """A policy over the verified history of its last `window` positions."""

    needs_history = True
    params = (WINDOW,)

    def __init__(self, window: int = 0):
        self.window = window


@catalog.register
class StaticWeights(Policy):
    """Equal weights in every block (IbED; TABED's Static^MT)."""

    name = "static"

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        return uniform(m)


@catalog.register
class RandomWeights(Policy):
    """Non-negative random weights summing to one, drawn per block (TABED's Random^MT)."""

    name = "random"

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        return sampler.dirichlet(m)


class InverseDistanceWeights(_Adaptive):
    """w_k proportional to 1 / (sum over the window of D(p, q_k)), D a distance of `key`."""

    key = ""

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        if not history.count():
            return uniform(m)
        inverse = 1.0 / (history.sum(self.key) + EPS)
        return inverse / inverse.sum()


@catalog.register
class KLWeights(InverseDistanceWeights):
    """w_k proportional to 1 / summed KL(p || q_k) over the window."""

    name = "kld"
    key = "kl"


@catalog.register
class TVWeights(InverseDistanceWeights):
    """w_k proportional to 1 / summed TV(p, q_k) over the window."""

    name = "tvd"
    key = "tv"


@catalog.register
class GridWeights(_Adaptive):
    """The 0.1-grid vector whose mixture's argmax matched the target's most; ties: lowest KL."""

    name = "grid"
    uses_grid = True

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        if not history.count():
            return uniform(m)
        matches, divergence = history.sum("grid_match"), history.sum("grid_kl")
        best = matches == matches.max()
        divergence = torch.where(best, divergence, torch.full_like(divergence, math.inf))
        return history.grid[int(divergence.argmin())].clone()


@catalog.register
class SoftmaxWeights(_Adaptive):
    """softmax(log(1 / e_k) / tau), i.e. proportional to (1 / e_k)^(1 / tau), with e_k the summed
    KL(p || q_k) over the window (TABED's MTCP*).

    The paper writes softmax([1/e_1, ..., 1/e_m]; tau) (appendix B.2); the release
    (furiosa-ai/TABED, candidate_generator_vlmsd.py `get_temperatured_weight`) normalises 1/e and
    applies the softmax to its logarithm at tau, so tau = 1 gives weights proportional to 1/e.
    We follow the release.
    """

    name = "softmax"
    params = (
        WINDOW,
        Param("softmax_temperature", NUMBER, 1.0, "tau", low=0, low_open=True, arg="temperature"),
    )
    source = "TABED's release, candidate_generator_vlmsd.py get_temperatured_weight (tau 1)"

    def __init__(self, window: int = 0, temperature: float = 1.0):
        super().__init__(window)
        self.temperature = float(temperature)

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        if not history.count():
            return uniform(m)
        inverse_error = 1.0 / (history.sum("kl") + EPS)
        return torch.softmax(inverse_error.log() / self.temperature, dim=0)


# a sum of weights this small against their magnitudes is 0 up to float64 rounding
ZERO_SUM = 1e-12
LIMIT = 1e5  # TABED's release: the weight of a view with error rate 0 (+) or 1 (-), where
# ln(1/eps - 1) is infinite


@catalog.register
class AdaBoostWeights(_Adaptive):
    """w_k = ln(1/eps_k - 1) + C ln(K - 1), eps_k = view k's argmax error rate over every
    verified position so far (appendix B.4), divided by their sum; +-1e5 at an error rate of 0
    or 1, negative weights kept, as TABED's release computes them.

    The release: candidate_generator_vlmsd.py, `agg_ftn` in get_candidates (eps = 1 - matches /
    cum_accepted_len, +-self.limit = 1e5 at the extremes) and pick_next_token (w / w.sum(), no
    clipping, so the normalised weights may take both signs; the mixture then goes through
    `mix`).

    Guard, not in the release: weights summing to 0 (e.g. +1e5 and -1e5: one view matched every
    position, the other none) would divide by zero (the release then drafts the argmax of an
    all-NaN mixture, token 0); they become equal weights, as the release makes them when every
    weight is 0 or -1e5. So do weights whose sum is 0 up to rounding (two views at error rates
    0.4 and 0.6 with C = 0: +-0.405, summing to 1.1e-16), which the division would turn into
    +-3.7e15 of a sign left to rounding.

    Options: `adaboost_smoothing` a counts eps as (errors + a) / (n + 2a), so a > 0 never gives
    +-1e5; `adaboost_clip` sets negative weights to 0 (all 0: equal weights); `window` h counts
    the last h positions. Smoothing 0.5 with clipping is an earlier mmspec variant.
    """

    name = "adaboost"
    params = (
        WINDOW,
        Param("adaboost_constant", NUMBER, 1.0, "C", arg="constant"),
        Param(
            "adaboost_smoothing",
            NUMBER,
            0.0,
            "a: error rate (errors + a) / (n + 2a)",
            low=0,
            hint="0 = TABED's release: +-1e5 at an error rate of 0 or 1",
            arg="smoothing",
        ),
        Param("adaboost_clip", bool, False, "negative weights set to 0", arg="clip"),
    )
    source = "TABED's release, candidate_generator_vlmsd.py get_candidates (agg_ftn, adaboost)"

    def __init__(
        self,
        window: int = 0,
        constant: float = 1.0,
        smoothing: float = 0.0,
        clip: bool = False,
        vocab_size: int = 2,
    ):
        super().__init__(window)
        self.constant = float(constant)
        self.smoothing = float(smoothing)
        self.clip = bool(clip)
        self.vocab_size = vocab_size

    @classmethod
    def from_spec(cls, spec: Values, vocab_size: int) -> Policy:
        return cls(**cls.arguments(spec), vocab_size=vocab_size)

    def raw(self, history: History) -> torch.Tensor:
        """The unnormalised weights [m] (float64) from the window's error counts."""
        n, a = history.count(), self.smoothing
        errors = history.sum("err").double()
        prior = self.constant * math.log(max(self.vocab_size - 1, 1))
        rate = (errors + a) / (n + 2 * a)
        weights = (1 / rate - 1).log() + prior
        weights = torch.where(rate == 0, torch.full_like(weights, LIMIT), weights)
        return torch.where(rate == 1, torch.full_like(weights, -LIMIT), weights)

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        if not history.count():
            return uniform(m)
        weights = self.raw(history)
        if self.clip:
            weights = weights.clamp_min(0)
        total = weights.sum()
        if not torch.isfinite(total) or abs(total) <= ZERO_SUM * weights.abs().sum():
            return uniform(m)
        return (weights / total).float()


def mix(weights: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """The views' mixture sum_k w_k q_k [n, V] of their distributions probs [m, n, V].

    The weights are renormalised in the mixture's precision (rejection sampling needs q to sum to
    one). With a negative weight (AdaBoost, unclipped as in TABED's release) the mixture can put
    negative mass on some tokens: that mass becomes 0 and the rest is renormalised. This keeps
    the mixture's argmax, the token TABED's release drafts, and makes q a distribution to sample
    from and verify against (the release only takes the argmax).
    """
    weights = weights.to(probs.device, probs.dtype)
    mixture = torch.einsum("m,mnv->nv", weights / weights.sum(), probs)
    if (weights < 0).any():
        mixture = mixture.clamp_min(0)
        mixture = mixture / mixture.sum(-1, keepdim=True)
    return mixture
