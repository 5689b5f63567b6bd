"""Exact output distributions of a speculative method, by enumerating every random choice.

The engine makes all its random choices through a `Sampler`. `outcomes(run)` runs a piece of the
engine once per outcome of its discrete choices (a token from a distribution, a coin, the first
rejection along a chain), replaying the choices before and branching at the first new one, and
returns each outcome's exact probability. `speculative_distribution` drives the loop's four calls
(propose, verify, accept, commit) this way, forking the decoding state between them, and sums the
probability of every sequence of first tokens; `target_distribution` computes the same from the
target alone. A lossless method makes the two equal up to float64 rounding.

Continuous choices (random ensemble weights) are drawn, not enumerated, from a fixed generator:
losslessness must hold for every weight vector, so it is checked for the ones drawn.
"""

from __future__ import annotations

import contextlib
import copy
from collections import defaultdict

import torch

from mmspec.decoding.decoder import Decoder
from mmspec.decoding.loops import Speculation
from mmspec.decoding.probability import distribution
from mmspec.decoding.sampler import Sampler


class ScriptedSampler(Sampler):
    """Takes the choices of `script`, then the first option of every new choice, recording where
    the run could have gone otherwise and the probability of the path taken."""

    def __init__(self, script: list[int]):
        self.script = script
        self.taken: list[int] = []
        self.branches: list[tuple[int, int]] = []  # (choice index, number of options)
        self.probability = 1.0
        self.weights = torch.Generator().manual_seed(0)

    def _choose(self, options: list[tuple[object, float]]):
        options = [(value, p) for value, p in options if p > 0]
        i = len(self.taken)
        if i < len(self.script):
            k = self.script[i]
        else:
            k = 0
            if len(options) > 1:
                self.branches.append((i, len(options)))
        value, p = options[k]
        self.taken.append(k)
        self.probability *= p
        return value

    def categorical(self, probs: torch.Tensor) -> int:
        return self._choose(list(enumerate(probs.double().tolist())))

    def accept(self, probability: float) -> bool:
        a = min(max(float(probability), 0.0), 1.0)
        return self._choose([(True, a), (False, 1.0 - a)])

    def first_rejection(self, probabilities: torch.Tensor) -> int:
        a = probabilities.double().clamp(0, 1).tolist()
        options, reach = [], 1.0  # reach: probability that the first k coins all came up True
        for k, ak in enumerate(a):
            options.append((k, reach * (1.0 - ak)))
            reach *= ak
        options.append((len(a), reach))
        return self._choose(options)

    def coins(self, probabilities: torch.Tensor) -> torch.Tensor:
        flips = [self.accept(a) for a in probabilities.double().tolist()]
        return torch.tensor(flips, device=probabilities.device)

    def graded_accept(self, exact: float, relaxed: float) -> tuple[bool, bool]:
        b = min(max(float(relaxed), 0.0), 1.0)
        a = min(max(float(exact), 0.0), b)
        return self._choose([((True, False), a), ((True, True), b - a), ((False, False), 1.0 - b)])

    def graded_first_rejection(self, exact: torch.Tensor, relaxed: torch.Tensor):
        # one choice among the (k, relaxed count) outcomes: entries before k accepted, each by
        # relaxing with probability (b - a) / b, entry k rejected with 1 - b
        b = relaxed.double().clamp(0, 1).tolist()
        a = [min(max(x, 0.0), y) for x, y in zip(exact.double().tolist(), b, strict=True)]
        options, counts = [], [1.0]  # counts[r]: P(first k accepted, r of them by relaxing)
        for k in range(len(b) + 1):
            stop = 1.0 - b[k] if k < len(b) else 1.0
            options += [((k, r), p * stop) for r, p in enumerate(counts)]
            if k < len(b):
                exact_k, loose_k = a[k], b[k] - a[k]
                counts = [
                    (counts[r] * exact_k if r < len(counts) else 0.0)
                    + (counts[r - 1] * loose_k if r > 0 else 0.0)
                    for r in range(len(counts) + 1)
                ]
        return self._choose(options)

    def dirichlet(self, m: int) -> torch.Tensor:
        draws = -torch.rand(m, generator=self.weights).clamp_min(1e-12).log()
        return draws / draws.sum()


def outcomes(run) -> list[tuple[float, object]]:
    """`run(sampler)` once per outcome of its discrete choices: [(probability, result)]."""
    results, stack = [], [[]]
    while stack:
        sampler = ScriptedSampler(stack.pop())
        result = run(sampler)
        results.append((sampler.probability, result))
        for position, n in sampler.branches:
            stack += [sampler.taken[:position] + [alt] for alt in range(1, n)]
    return results


def _copy_tensor(tensor: torch.Tensor, memo: dict) -> torch.Tensor:
    """`copy.deepcopy` of a plain tensor that owns its whole storage, by `clone()`: a third of
    the enumeration's time went to `Tensor.__deepcopy__` (about 100 us a tensor). Any other
    tensor (a view, one sharing a storage already copied, one with autograd state or attributes)
    takes `Tensor.__deepcopy__`, which keeps views aliased; recording the clone's storage under
    the original's keeps them aliased when a view of this tensor is copied afterwards."""
    storage = tensor.untyped_storage()
    owns_storage = (
        type(tensor) is torch.Tensor
        and tensor.layout == torch.strided
        and tensor._base is None
        and not tensor.requires_grad
        and not tensor.__dict__
        and tensor.storage_offset() == 0
        and tensor.is_contiguous()
        and storage.nbytes() == tensor.numel() * tensor.element_size()
        and id(storage) not in memo
    )
    if not owns_storage:
        return tensor.__deepcopy__(memo)
    copied = tensor.clone()
    memo[id(storage)] = copied.untyped_storage()
    return copied


@contextlib.contextmanager
def _fast_tensor_copies():
    """`_copy_tensor` as deepcopy's copier of plain tensors, for the enclosed copies only."""
    previous = copy._deepcopy_dispatch.get(torch.Tensor)
    copy._deepcopy_dispatch[torch.Tensor] = _copy_tensor
    try:
        yield
    finally:
        if previous is None:
            del copy._deepcopy_dispatch[torch.Tensor]
        else:
            copy._deepcopy_dispatch[torch.Tensor] = previous


class Forker:
    """Deep copies of decoding state that share the models' modules and parameters."""

    def __init__(self, models):
        self.shared = {}
        for model in models:
            for module in model.modules():
                self.shared[id(module)] = module
            for tensor in [*model.parameters(), *model.buffers()]:
                self.shared[id(tensor)] = tensor

    def __call__(self, state):
        with _fast_tensor_copies():
            return copy.deepcopy(state, dict(self.shared))


def speculative_distribution(
    start, prompt, draft_prompts, n_tokens: int, fork: Forker, score_visual=None, seen=None
) -> dict[tuple[int, ...], float]:
    """The exact distribution of the first `n_tokens` tokens a speculative method emits.

    `start(sampler)` returns a fresh `Speculation` drawing from `sampler`. States reached by the
    same steps emitting the same tokens are explored once (their futures are the same).
    `seen(proposal)`, if given, is called with each proposal explored.
    """
    memo: dict[tuple, dict] = {}

    def begin(sampler):
        run = start(sampler)
        return run, run.start(prompt, draft_prompts, score_visual)

    def future(run: Speculation, key: tuple, need: int) -> dict:
        if key in memo:
            return memo[key]
        out: dict[tuple, float] = defaultdict(float)

        def propose(sampler):
            forked = fork(run)
            forked.sampler = sampler
            return forked, forked.propose(need)

        for p_draft, (drafted, proposal) in outcomes(propose):
            if seen is not None:
                seen(proposal)
            forward = drafted.verify(proposal)

            def accept(sampler, drafted=drafted, proposal=proposal, forward=forward):
                drafted.sampler = sampler
                return drafted.accept(proposal, forward)

            for p_accept, (path, token) in outcomes(accept):
                emitted = tuple(proposal.tokens[i] for i in path) + (token,)
                p = p_draft * p_accept
                if len(emitted) >= need:
                    out[emitted[:need]] += p
                    continue
                child = key + (emitted,)
                if child not in memo:
                    after = fork(drafted)
                    after.commit(proposal, forward, path, token)
                    future(after, child, need - len(emitted))
                for rest, q in memo[child].items():
                    out[emitted + rest] += p * q
        memo[key] = out
        return out

    result: dict[tuple, float] = defaultdict(float)
    for p_first, (run, first) in outcomes(begin):
        if n_tokens == 1:
            result[(first,)] += p_first
            continue
        for rest, q in future(run, ((first,),), n_tokens - 1).items():
            result[(first, *rest)] += p_first * q
    return dict(result)


@torch.inference_mode()
def target_distribution(
    target: Decoder, prompt: torch.Tensor, n_tokens: int, temperature: float = 1.0
) -> dict[tuple[int, ...], float]:
    """The exact distribution of the target's first `n_tokens` tokens (plain sampling)."""
    out: dict[tuple, float] = {}

    def walk(logits: torch.Tensor, prefix: tuple, prob: float) -> None:
        base = target.length
        for token, p in enumerate(distribution(logits, temperature).double().tolist()):
            if p <= 0:
                continue
            if len(prefix) + 1 == n_tokens:
                out[prefix + (token,)] = prob * p
                continue
            target.truncate(base)
            walk(target.extend([token]).logits[0, -1], prefix + (token,), prob * p)
        target.truncate(base)

    walk(target.prefill(prompt).logits[0], (), 1.0)
    return out


def total_variation(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
