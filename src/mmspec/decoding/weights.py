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
from mmspec.decoding.component import NUMBER, Param, WeightPolicy
from mmspec.lazy import torch

EPS = 1e-6


def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last dimension (0 log 0 = 0; q floored to avoid log 0)."""
    return (torch.xlogy(p, p) - p * q.clamp_min(1e-30).log()).sum(-1)


def weight_grid(m: int, steps: int = 10) -> torch.Tensor:
    """Every weight vector of m non-negative multiples of 1/steps summing to one [C, m]."""
    rows = []
    for bars in combinations(range(steps + m - 1), m - 1):  # stars and bars
        edges = (-1, *bars, steps + m - 1)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(m)])
    return torch.tensor(rows, dtype=torch.float32) / steps


class History:
    """Per-position scores of each view (and grid candidate) against the target."""

    def __init__(self, window: int, grid: torch.Tensor | None = None):
        self.window = window
        self.grid = grid
        self.rows: list[dict[str, torch.Tensor]] = []

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
        rows = self.rows[-self.window :] if self.window else self.rows
        return torch.stack([row[key] for row in rows]).sum(0)

    def count(self) -> int:
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
    """A weight policy: `choose` returns the block's weights [m], non-negative, summing to one.
    An adaptive policy reads the verified history over its last `window` positions."""

    needs_history = False  # whether it reads the history (else the drafter skips keeping it)
    uses_grid = False  # whether the history must score the 0.1-grid candidate mixtures
    window = 0

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        raise NotImplementedError

    @classmethod
    def from_spec(cls, spec: dict, vocab_size: int) -> Policy:
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


@catalog.register
class AdaBoostWeights(_Adaptive):
    """w_k = ln(1/eps_k - 1) + C ln(K - 1), eps_k = view k's argmax error rate (appendix B.4).

    Negative weights (worse than chance) are clipped to 0; all-zero falls back to uniform.
    """

    name = "adaboost"
    params = (WINDOW, Param("adaboost_constant", NUMBER, 1.0, "C", arg="constant"))

    def __init__(self, window: int = 0, constant: float = 1.0, vocab_size: int = 2):
        super().__init__(window)
        self.constant = float(constant)
        self.vocab_size = vocab_size

    @classmethod
    def from_spec(cls, spec: dict, vocab_size: int) -> Policy:
        return cls(**cls.arguments(spec), vocab_size=vocab_size)

    def choose(self, history: History, m: int, sampler) -> torch.Tensor:
        n = history.count()
        if not n:
            return uniform(m)
        # an error rate of exactly 0 or 1 would give an infinite weight: shrink by half a count
        error = ((history.sum("err") + 0.5) / (n + 1)).clamp(EPS, 1 - EPS)
        weights = (1 / error - 1).log() + self.constant * math.log(max(self.vocab_size - 1, 1))
        weights = weights.clamp_min(0)
        return weights / weights.sum() if weights.sum() > 0 else uniform(m)


def make_policy(spec: dict, vocab_size: int) -> Policy:
    """The weight policy a method spec names (`weights`, default static), with the
    hyperparameters it reads."""
    policy = catalog.get("weights", spec.get("weights", "static"))
    return policy.from_spec(spec, vocab_size)
