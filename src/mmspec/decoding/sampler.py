"""Every random choice the engine makes goes through a `Sampler`.

`TorchSampler` draws from a CPU torch.Generator, on the CPU, whatever device the models run on:
reruns with the same seed draw the same numbers on a CPU and on a GPU (where the probabilities are
equal), and a CUDA tensor never meets the CPU generator (torch refuses that pairing).
`mmspec verify-lossless` swaps in a sampler that enumerates every outcome of the discrete
choices instead of drawing one (decoding.enumeration), so the engine's own code is what it checks.
"""

from __future__ import annotations

from mmspec.decoding.lazy import torch


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

    def graded_accept(self, exact: float, relaxed: float) -> tuple[bool, bool]:
        """`accept(relaxed)` with the same draw graded: (accepted, accepted only because the
        probability was raised from `exact` to `relaxed`). A lossy rule that raises acceptance
        probabilities counts its relaxed tokens this way without changing what it decides."""
        raise NotImplementedError

    def graded_first_rejection(self, exact: torch.Tensor, relaxed: torch.Tensor):
        """`first_rejection(relaxed)` with the same draws graded: (k, how many of the k accepted
        entries a coin of probability `exact` would have rejected)."""
        raise NotImplementedError

    def dirichlet(self, m: int) -> torch.Tensor:
        """m non-negative weights summing to one, uniform over the simplex (Dirichlet(1, ...))."""
        raise NotImplementedError


class TorchSampler(Sampler):
    """Draws from `generator`, a CPU generator (None: torch's global CPU generator). Every draw
    is taken on the CPU: a distribution on another device is copied there first (one small host
    copy per draw; reading the drawn index back costs that synchronisation anyway), and uniforms
    drawn here are moved to the device of the probabilities they are compared with."""

    def __init__(self, generator: torch.Generator | None = None):
        if generator is not None and generator.device.type != "cpu":
            raise ValueError(
                f"TorchSampler draws on the CPU (the same numbers on every device); got a "
                f"{generator.device} generator"
            )
        self.generator = generator

    def categorical(self, probs: torch.Tensor) -> int:
        return int(torch.multinomial(probs.detach().cpu(), 1, generator=self.generator))

    def accept(self, probability: float) -> bool:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64)) < probability

    def first_rejection(self, probabilities: torch.Tensor) -> int:
        return int(self.coins(probabilities).int().cumprod(0).sum())

    def coins(self, probabilities: torch.Tensor) -> torch.Tensor:
        return self._uniforms(probabilities) < probabilities

    def _uniforms(self, like: torch.Tensor) -> torch.Tensor:
        """Uniforms shaped like `like`, drawn here on the CPU, on `like`'s device."""
        draws = torch.rand(like.shape, generator=self.generator, dtype=like.dtype)
        return draws.to(like.device)

    def graded_accept(self, exact: float, relaxed: float) -> tuple[bool, bool]:
        u = float(torch.rand((), generator=self.generator, dtype=torch.float64))
        return u < relaxed, exact <= u < relaxed

    def graded_first_rejection(self, exact: torch.Tensor, relaxed: torch.Tensor):
        u = self._uniforms(relaxed)
        k = int((u < relaxed).int().cumprod(0).sum())
        return k, int((u[:k] >= exact[:k]).sum())

    def dirichlet(self, m: int) -> torch.Tensor:
        draws = -torch.rand(m, generator=self.generator).clamp_min(1e-12).log()
        return draws / draws.sum()


def seeded(seed: int) -> TorchSampler:
    return TorchSampler(torch.Generator().manual_seed(seed))
