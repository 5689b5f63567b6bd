"""A watch on every random draw torch makes, held to the rules a GPU enforces.

torch refuses a draw whose generator lives on another device than the tensor it draws for (a
CPU generator over CUDA probabilities: "Expected a 'cuda' device type for generator but found
'cpu'"), and a draw from the global generator gives other numbers on a GPU than on a CPU. A CPU
run sees neither problem, so `DrawAudit` (a TorchFunctionMode) checks every draw as it happens:
the generator is given explicitly, it is a CPU generator, and the tensors the draw reads or
fills sit on the generator's device. With tensors faked onto a CUDA device (FakeTensorMode needs
no GPU), the same watch sees what a GPU would refuse.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# torch functions and Tensor methods that draw random numbers (all take `generator=`)
DRAWS = {
    "multinomial",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "randint",
    "randint_like",
    "randperm",
    "bernoulli",
    "bernoulli_",
    "normal",
    "normal_",
    "poisson",
    "uniform_",
    "exponential_",
    "geometric_",
    "cauchy_",
    "log_normal_",
    "random_",
}
# functions that draw from the global generator when they draw at all (no `generator=`)
GLOBAL_DRAWS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"}


class DrawViolation(AssertionError):
    """A draw a GPU would refuse, or one whose numbers would differ on a GPU."""


def _tensors(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (v for v in value if isinstance(v, torch.Tensor))


class DrawAudit(TorchFunctionMode):
    """Records every draw as (name, generator device, devices of its tensors) in `draws` and
    raises `DrawViolation` at the first one that breaks the contract."""

    def __init__(self):
        super().__init__()
        self.draws: list[tuple[str, str, list[str]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in DRAWS:
            self._check(name, args, kwargs)
        elif name in GLOBAL_DRAWS:
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if training and p > 0:
                raise DrawViolation(f"{name} draws from the global generator (p={p})")
        return func(*args, **kwargs)

    def _check(self, name, args, kwargs) -> None:
        generator = kwargs.get("generator")
        if generator is None:
            raise DrawViolation(f"{name} draws from the global generator, not a seeded one")
        if generator.device.type != "cpu":
            raise DrawViolation(f"{name} draws from a {generator.device} generator, not a CPU one")
        devices = [t.device for t in _tensors(args, kwargs)]
        if "device" in kwargs and kwargs["device"] is not None:
            devices.append(torch.device(kwargs["device"]))
        self.draws.append((name, generator.device.type, [d.type for d in devices]))
        for device in devices:
            if device.type != generator.device.type:
                raise DrawViolation(
                    f"{name} draws for a {device} tensor from a {generator.device} generator "
                    f"(a GPU refuses this pairing)"
                )
