"""Lossless rejection sampling (temperature > 0), for chains drawn from q and for trees.

Two proposals, two constructions, each exact:

- A chain whose tokens were drawn from the draft distributions q_i (`proposal.q`): accept x_i
  with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection emit a token from
  norm(max(0, p_i - q_i)); when every token is accepted, a bonus token from the next p
  (Leviathan et al. 2023; Chen et al. 2023).
- Any tree (or chain) whose nodes were chosen deterministically from the draft (top-k: static,
  EAGLE-2 and SAGE trees, whatever pruning and reranking chose them; `proposal.q` is None): each
  node is a point-mass proposal. Children of the current node are tried in order: accept token x
  with probability p(x); after a rejection p <- p with x zeroed, renormalised (the residual of a
  point mass); accepting descends into the child; if all are rejected, emit a token from the last
  p. Every token then leaves the step with exactly probability p(x), whatever the tree (EAGLE's
  release, eagle/model/utils.py `evaluate_posterior`; SpecInfer's multi-step verification with
  deterministic candidates). Since the draft's choices never depend on draws made against the
  target, the output distribution is the target's.
"""

from __future__ import annotations

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.rule import Rule
from mmspec.decoding.lazy import torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT, Proposal


def accept_sampling(proposal: Proposal, logits: torch.Tensor, temperature, sampler):
    if temperature == 0:
        return accept_greedy(proposal, logits, temperature, sampler)
    p_rows = distribution(logits, temperature)
    if proposal.q is not None:
        return _accept_drawn_chain(proposal, p_rows, sampler)
    return _accept_point_masses(proposal, p_rows, sampler)


def _accept_drawn_chain(proposal: Proposal, p_rows: torch.Tensor, sampler):
    if not proposal.is_chain:
        raise ValueError("draws from q are verified only on chains; trees are point masses")
    n = len(proposal.tokens)
    tokens = proposal.tokens_tensor(p_rows.device)
    q = proposal.q.to(p_rows.dtype)
    rows = torch.arange(n, device=p_rows.device)
    p_x, q_x = p_rows[rows, tokens], q[rows, tokens]
    # q(x) > 0 since x was drawn from q; min(1, p/q) as one vector, one comparison
    k = sampler.first_rejection((p_x / q_x).clamp(max=1.0))
    if k == n:
        return list(range(n)), sampler.categorical(p_rows[n])
    return list(range(k)), sampler.categorical(_residual(p_rows[k], q[k]))


def _accept_point_masses(proposal: Proposal, p_rows: torch.Tensor, sampler, relax=None):
    """`relax(p, token)`, for a lossy rule: (acceptance probability, residual after a rejection)
    in place of p(token) and p with token zeroed; the rule then also returns how many accepted
    nodes the same draw would have rejected at p(token) (its relaxed nodes)."""
    children, path, node, relaxed = proposal.children(), [], ROOT, 0
    while True:
        p, accepted = p_rows[node + 1], None
        for child in children.get(node, []):
            token = proposal.tokens[child]
            if relax is not None:
                chance, residual = relax(p, token)
                hit, by_relaxing = sampler.graded_accept(float(p[token]), chance)
                if hit:
                    accepted, relaxed = child, relaxed + by_relaxing
                    break
                p = residual
                continue
            if sampler.accept(float(p[token])):
                accepted = child
                break
            if p[token] > 0:  # a repeated sibling token was already zeroed
                p = p.clone()
                p[token] = 0
                p = p / p.sum()
        if accepted is None:
            token = sampler.categorical(p)
            return (path, token) if relax is None else (path, token, relaxed)
        path.append(accepted)
        node = accepted


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); p itself when the difference has no mass (p == q up to rounding)."""
    residual = (p - q).clamp_min(0)
    total = residual.sum()
    return residual / total if total > 0 else p


@catalog.register
class Sampling(Rule):
    """Rejection sampling (Leviathan et al.; Chen et al.; recursive over trees)."""

    name = "sampling"
    lossless = True
    judge = staticmethod(accept_sampling)
