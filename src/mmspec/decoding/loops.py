"""The decoding loops: autoregressive and speculative, over `Decoder`s with KV caches.

Both emit the first token from the target's prefill, stop at an end token or `max_new` tokens,
and time prefill and decode separately (perf_counter, synchronised on accelerators).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from mmspec.decoding.acceptance import pick
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.timing import sync


@dataclass
class Step:
    """One target verification forward and what it yielded."""

    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    weights: tuple[float, ...] = ()  # the drafter's ensemble weights for this block
    depth: int = 0  # levels of the proposal (gamma for a chain)
    width: int = 0  # most proposal nodes on one level (1 for a chain)


@dataclass
class Generation:
    tokens: list[int]
    steps: list[Step] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0


def _append(tokens: list[int], new: list[int], stop: set[int], max_new: int) -> bool:
    """Append `new` up to the first stop token or max_new tokens; say whether decoding is over.

    Earlier tokens held no stop token, so only the new ones are scanned.
    """
    for token in new:
        if len(tokens) >= max_new:
            return True
        tokens.append(token)
        if token in stop:
            return True
    return len(tokens) >= max_new


def _start(
    target: Decoder, prompt, temperature, generator, then=None, score_visual=None
) -> Generation:
    """Prefill the target (and run `then(first_token, visual_attention)`, e.g. the drafter's
    prefill), timed together: a drafter built from the target's prefill pays for it here."""
    sync(target.device)
    start = time.perf_counter()
    forward = target.prefill(prompt, score_visual)
    token = pick(forward.logits[0], temperature, generator)
    if then is not None:
        then(token, forward.visual_attention)
    sync(target.device)
    return Generation([token], prefill_s=time.perf_counter() - start)


def decode_ar(
    target: Decoder,
    prompt: torch.Tensor,
    max_new: int,
    stop: set[int],
    temperature: float,
    generator: torch.Generator | None,
) -> Generation:
    """Plain autoregressive decoding: one target forward per token."""
    device = target.device
    out = _start(target, prompt, temperature, generator)
    token = out.tokens[0]
    start = time.perf_counter()
    done = token in stop or max_new <= 1
    while not done:
        step_start = time.perf_counter()
        token = pick(target.extend([token]).logits[0, -1], temperature, generator)
        out.tokens.append(token)
        sync(device)
        out.steps.append(Step(0, 0, 0.0, time.perf_counter() - step_start))
        done = token in stop or len(out.tokens) >= max_new
    out.decode_s = time.perf_counter() - start
    return out


def decode_speculative(
    target: Decoder,
    prompt: torch.Tensor,
    drafter,
    draft_prompts,
    policy,
    rule,
    max_new: int,
    stop: set[int],
    temperature: float,
    generator: torch.Generator | None,
    score_visual: torch.Tensor | None = None,
) -> Generation:
    """Draft with `policy`, verify in one target forward, accept with `rule`, repeat.

    `draft_prompts` holds the drafter's prompt in each of its views, or builds them after the
    target's prefill: `draft_prompts(visual_attention)`, where `visual_attention` is that
    prefill's score of each visual token when `score_visual` (the prompt's visual positions)
    asks for it, else None.
    """
    device = target.device

    def start_drafter(token, attention):
        prompts = draft_prompts(attention) if callable(draft_prompts) else draft_prompts
        drafter.start(prompts, token)

    out = _start(target, prompt, temperature, generator, start_drafter, score_visual)
    token = out.tokens[0]
    start = time.perf_counter()
    done = token in stop or max_new <= 1
    while not done:
        t0 = time.perf_counter()
        proposal = policy.propose(drafter, generator)
        t1 = time.perf_counter()
        base = target.length
        logits = target.extend([token] + proposal.tokens, proposal.attention()).logits[0]
        path, token = rule(proposal, logits, temperature, generator)
        target.keep(base, [0] + [i + 1 for i in path])
        drafter.commit(proposal, path, token, logits)
        emitted = [proposal.tokens[i] for i in path] + [token]
        done = _append(out.tokens, emitted, stop, max_new)
        sync(device)
        step_s = time.perf_counter() - t1
        weights = tuple(drafter.weights.tolist())
        depth, width = proposal.shape()
        step = Step(len(proposal.tokens), len(path), t1 - t0, step_s, weights, depth, width)
        out.steps.append(step)
    out.decode_s = time.perf_counter() - start
    return out
