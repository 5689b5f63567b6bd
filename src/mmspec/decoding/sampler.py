"""Every random choice the engine makes goes through a `Sampler`.

`TorchSampler` draws from a torch.Generator (reruns with the same seed draw the same numbers).
`mmspec verify-lossless` swaps in a sampler that enumerates every outcome of the discrete
choices instead of drawing one (decoding.enumeration), so the engine's own code is what it checks.
"""

from __future__ import annotations

import torch


class Sampler:
    """The engine's random choices: a token from a distribution, a coin, ensemble weights."""

    def categorical(self, probs: torch.Tensor) -> int:
        """One index drawn from `probs` ([V], summing to one)."""
        raise NotImplementedError

    def accept(self, probability: float) -> bool:
        """True with `probability` (clipped to [0, 1])."""
        raise NotImplementedError

    def first_rejection(self, probabilities: torch.Tensor) -> int:
        """Flip one coin per entry (True with that probability); the index of the first False,
        or the length when every coin is True (a chain's accepted prefix in one comparison)."""
        raise NotImplementedError

    def coins(self, probabilities: torch.Tensor) -> torch.Tensor:
        """The coins `first_rejection` flips, all of them (bool, one per entry)."""
        raise NotImplementedError

    def dirichlet(self, m: int) -> torch.Tensor:
        """m non-negative weights summing to one, uniform over the simplex (Dirichlet(1, ...))."""
        raise NotImplementedError


class TorchSampler(Sampler):
    """Draws from `generator` (None: torch's global generator)."""

    def __init__(self, generator: torch.Generator | None = None):
        self.generator = generator

    def categorical(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def accept(self, probability: float) -> bool:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64)) < probability

    def first_rejection(self, probabilities: torch.Tensor) -> int:
        return int(self.coins(probabilities).int().cumprod(0).sum())

    def coins(self, probabilities: torch.Tensor) -> torch.Tensor:
        draws = torch.rand(probabilities.shape, generator=self.generator, dtype=probabilities.dtype)
        return draws.to(probabilities.device) < probabilities

    def dirichlet(self, m: int) -> torch.Tensor:
        draws = -torch.rand(m, generator=self.generator).clamp_min(1e-12).log()
        return draws / draws.sum()


def seeded(seed: int) -> TorchSampler:
    return TorchSampler(torch.Generator().manual_seed(seed))
