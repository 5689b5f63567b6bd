"""The decoding loops: autoregressive and speculative, over `Decoder`s with KV caches.

Both emit the first token from the target's prefill, stop at an end token or `max_new` tokens,
and time prefill and decode separately (perf_counter, synchronised on accelerators). One
speculative step is four calls of `Speculation` (propose, verify, accept, commit), which
`mmspec verify-lossless` also drives, outcome by outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from mmspec.decoding.decoder import Decoder, Forward
from mmspec.decoding.probability import pick
from mmspec.decoding.prompt import Prompt
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.timing import sync
from mmspec.decoding.token_context import TokenContext


@dataclass
class Step:
    """One target verification forward and what it yielded."""

    drafted: int
    accepted: int  # accepted draft tokens that were emitted (not cut by a stop or max_new)
    draft_s: float
    verify_s: float
    weights: tuple[float, ...] = ()  # the drafter's ensemble weights for this block
    depth: int = 0  # levels of the proposal (gamma for a chain)
    width: int = 0  # most proposal nodes on one level (1 for a chain)
    relaxed: int = 0  # accepted nodes a lossy rule accepted without an exact match


@dataclass
class Generation:
    tokens: list[int]
    steps: list[Step] = field(default_factory=list)
    prefill_s: float = 0.0
    decode_s: float = 0.0


def emit(tokens: list[int], new: list[int], stop: set[int], max_new: int) -> int:
    """Append `new` up to and including the first stop token, at most up to max_new tokens;
    how many were appended. Earlier tokens held no stop token, so only the new ones are scanned."""
    room = max_new - len(tokens)
    for n, token in enumerate(new[:room], start=1):
        tokens.append(token)
        if token in stop:
            return n
    return max(0, min(room, len(new)))


def finished(tokens: list[int], stop: set[int], max_new: int) -> bool:
    return tokens[-1] in stop or len(tokens) >= max_new


def decode_ar(
    target: Decoder,
    prompt: Prompt | torch.Tensor,
    max_new: int,
    stop: set[int],
    temperature: float,
    sampler,
) -> Generation:
    """Plain autoregressive decoding: one target forward per token."""
    device = target.device
    sync(device)
    start = time.perf_counter()
    out = Generation([pick(target.prefill(prompt).logits[0], temperature, sampler)])
    sync(device)
    out.prefill_s = time.perf_counter() - start
    _ar_steps(target, out, lambda tokens: finished(tokens, stop, max_new), temperature, sampler)
    return out


def probe_ar(
    target: Decoder, prompt_length: int, first_token: int, steps: int, temperature, sampler
) -> Generation:
    """AR's first `steps` steps after a prompt the target has just read for a method's decode
    (its cache holds the prompt, then whatever the method decoded: dropped here), each timed as
    `decode_ar` times its steps: AR's speed on this device under this load, right beside the
    method's decode, without a prefill of its own. Which tokens it feeds does not change a
    step's time; they are the target's own picks."""
    target.truncate(prompt_length)
    out = Generation([first_token])
    sync(target.device)
    _ar_steps(target, out, lambda tokens: len(tokens) > steps, temperature, sampler)
    return out


def _ar_steps(target: Decoder, out: Generation, done, temperature: float, sampler) -> None:
    """AR steps appended to `out` until `done(out.tokens)`, each timed (a forward, its pick, a
    sync), their whole time `out.decode_s`."""
    device = target.device
    start = time.perf_counter()
    while not done(out.tokens):
        step_start = time.perf_counter()
        out.tokens.append(pick(target.extend([out.tokens[-1]]).logits[0, -1], temperature, sampler))
        sync(device)
        out.steps.append(Step(0, 0, 0.0, time.perf_counter() - step_start))
    out.decode_s = time.perf_counter() - start


def argmax_misses(target: Decoder, prompt: Prompt | torch.Tensor, tokens: list[int]) -> list:
    """Feed `tokens` (an output of this prompt) to the target one token at a time, as AR decodes;
    (position, logits [V]) at each position whose token is not the target's own argmax there:
    where a greedy output leaves what AR would emit after the same prefix."""
    misses = []
    logits = target.prefill(prompt).logits[0]
    for i, token in enumerate(tokens):
        if int(logits.argmax()) != token:
            misses.append((i, logits.detach().clone()))
        if i + 1 < len(tokens):
            logits = target.extend([token]).logits[0, -1]
    return misses


class Speculation:
    """The state of one speculative generation: target and drafter caches and the policies;
    for a drafter that reads tokens, the generation's `TokenContext` (`tokenizer`: the
    target's)."""

    def __init__(
        self, target: Decoder, drafter, policy, rule, temperature: float, sampler, tokenizer=None
    ):
        self.target, self.drafter, self.policy, self.rule = target, drafter, policy, rule
        self.temperature, self.sampler, self.tokenizer = temperature, sampler, tokenizer
        self.last = 0  # the last emitted token (the root of the next proposal)
        self.base = 0  # target cache length before the current verification
        self.visual_states = None  # the prompt's visual tokens' last-layer states (LVSpec)
        self.relaxed = 0  # nodes the last `accept` relaxed
        self.tokens: TokenContext | None = None  # built only for a drafter that reads tokens

    def start(self, prompt: Prompt | torch.Tensor, draft_prompts, score_visual=None) -> int:
        """Prefill the target, emit its first token, start the drafter; the first token.

        `draft_prompts` holds the drafter's prompt in each of its views, or builds them from
        the target's prefill: `draft_prompts(visual_attention)` (view S), where
        `visual_attention` scores each visual token when `score_visual` (the prompt's visual
        positions) asks for it, else is None.
        """
        forward = self.target.prefill(prompt, score_visual, self.drafter.target_layers)
        self.last = pick(forward.logits[0], self.temperature, self.sampler)
        if getattr(self.rule, "reads_hidden", False):
            self.visual_states = visual_states(prompt, forward, self.rule.name)
        attention = forward.visual_attention
        prompts = draft_prompts(attention) if callable(draft_prompts) else draft_prompts
        self.policy.start()
        if getattr(self.drafter, "reads_tokens", False):
            self.tokens = TokenContext.of(prompt, self.tokenizer, self.last)
            self.drafter.start(prompts, self.last, forward.row(0), self.tokens)
        else:
            self.drafter.start(prompts, self.last, forward.row(0))
        return self.last

    def propose(self, room: int) -> Proposal:
        """The next proposal, no deeper than the `room` tokens the generation may still emit."""
        return self.policy.propose(self.drafter, self.sampler, room)

    def verify(self, proposal: Proposal) -> Forward:
        """One target forward over the root and every node (tree-masked unless a chain)."""
        self.base = self.target.length
        tokens = [self.last] + proposal.tokens
        return self.target.extend(tokens, proposal.attention(), layers=self.drafter.target_layers)

    def accept(self, proposal: Proposal, forward: Forward) -> tuple[list[int], int]:
        """The accepted path and the next token; `relaxed` keeps how many nodes were relaxed."""
        states = {}
        if self.visual_states is not None:
            states = {"hidden": forward.hidden[0, 1:], "visual": self.visual_states}
        verdict = getattr(self.rule, "verdict", None)
        if verdict is None:  # a bare rule function (tests): nothing relaxed
            path, token = self.rule(proposal, forward.logits[0], self.temperature, self.sampler)
            return path, token
        path, token, self.relaxed = verdict(
            proposal, forward.logits[0], self.temperature, self.sampler, **states
        )
        return path, token

    def commit(self, proposal: Proposal, forward: Forward, path: list[int], token: int) -> list:
        """Keep the accepted path in both caches; the tokens this step emits."""
        rows = [0] + [i + 1 for i in path]
        self.target.keep(self.base, rows)
        self.policy.observe(len(path))
        emitted = [proposal.tokens[i] for i in path] + [token]
        if self.tokens is not None:  # before the drafter's commit, which may read it
            self.tokens.output.extend(emitted)
        self.drafter.commit(proposal, path, token, forward.row(0).select(rows))
        self.last = token
        return emitted


def visual_states(prompt, forward: Forward, rule: str) -> torch.Tensor:
    """The last-layer hidden states of the prompt's visual tokens, from its prefill [l_v, H]."""
    visual = getattr(prompt, "visual", None)
    if visual is None or not bool(visual.any()):
        raise ValueError(
            f"acceptance {rule!r} compares drafted tokens with the prompt's visual tokens, and "
            "this prompt has none (a sample with images or video is needed)"
        )
    return forward.hidden[0][visual.to(forward.hidden.device)]


def decode_speculative(
    target: Decoder,
    prompt: Prompt | torch.Tensor,
    drafter,
    draft_prompts,
    policy,
    rule,
    max_new: int,
    stop: set[int],
    temperature: float,
    sampler,
    score_visual: torch.Tensor | None = None,
    tokenizer=None,
) -> Generation:
    """Draft with `policy`, verify in one target forward, accept with `rule`, repeat;
    `tokenizer` (the target's) is what a drafter that reads tokens gets with them."""
    device = target.device
    run = Speculation(target, drafter, policy, rule, temperature, sampler, tokenizer)
    sync(device)
    start = time.perf_counter()
    out = Generation([run.start(prompt, draft_prompts, score_visual)])
    sync(device)
    out.prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    while not finished(out.tokens, stop, max_new):
        t0 = time.perf_counter()
        proposal = run.propose(max_new - len(out.tokens))
        t1 = time.perf_counter()
        forward = run.verify(proposal)
        path, token = run.accept(proposal, forward)
        emitted = emit(out.tokens, run.commit(proposal, forward, path, token), stop, max_new)
        sync(device)
        depth, width = proposal.shape()
        weights = tuple(drafter.weights.tolist())
        step = Step(
            len(proposal.tokens),
            min(len(path), emitted),
            t1 - t0,
            time.perf_counter() - t1,
            weights,
            depth,
            width,
            min(run.relaxed, len(path), emitted),
        )
        out.steps.append(step)
    out.decode_s = time.perf_counter() - start
    return out
