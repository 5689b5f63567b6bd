"""How biased sampling over EAGLE-2 and SAGE trees was before mmspec verified trees as point masses.

mmspec used to draw each node's children from the draft q without replacement and then prune or
rerank them by their drawn identities (EAGLE-2: keep the best cumulative log q; SAGE: keep while
the path probability clears a threshold), verifying the result with recursive rejection sampling
as if the kept children were plain draws from q. This script rebuilds those two constructions on
the drafter protocol, small enough to enumerate (a 4-token vocabulary, two-level trees), and
prints the exact total variation distance between the first token they emit after the prefill's
and the target's own distribution, next to the current construction (deterministic top-k
children, point-mass verification), which must be 0 up to rounding.

    python benchmarks/pruned_draws_bias.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import math

import torch

from mmspec.decoding.enumeration import (
    Forker,
    speculative_distribution,
    target_distribution,
    total_variation,
)
from mmspec.decoding.loops import Speculation
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT, Proposal
from mmspec.decoding.trees import DynamicTree, SageTree, TreePolicy
from mmspec.methods import registry, verify
from mmspec.methods.runtime import MethodRunner, Sample


def draws_without_replacement(q: torch.Tensor, k: int, sampler) -> list[int]:
    out, rest = [], q.clone()
    for _ in range(min(k, int((q > 0).sum()))):
        token = sampler.categorical(rest / rest.sum())
        out.append(token)
        rest[token] = 0
    return out


class DrawnDynamic(TreePolicy):
    """The former EAGLE-2 sampling construction: top_k draws per node, the top_k best of each
    level expanded, the total_tokens best kept (each with its parent and earlier-drawn sibling)."""

    def __init__(self, depth=2, top_k=2, total_tokens=2):
        self.depth, self.top_k, self.total = depth, top_k, total_tokens

    def propose(self, drafter, sampler, room):
        grown, score, rank, rows = Proposal(), [], [], []

        def add(q, parent, base):
            added = []
            for r, t in enumerate(draws_without_replacement(q, self.top_k, sampler)):
                added.append(grown.add(t, parent))
                score.append(base + math.log(float(q[t])))
                rank.append(r)
                rows.append(q)
            return added

        level = add(drafter.root(sampler), ROOT, 0.0)
        for _ in range(2, self.depth + 1):
            frontier = sorted(level, key=lambda c: -score[c])[: self.top_k]
            level = []
            for c, q in zip(frontier, drafter.expand(grown, frontier), strict=True):
                level += add(q, c, score[c])
        keep, kept_rank = set(), set()
        for c in sorted(range(len(grown.tokens)), key=lambda c: (-score[c], c)):
            if len(keep) == self.total:
                break
            parent = grown.parents[c]
            if parent != ROOT and parent not in keep:
                continue
            if rank[c] > 0 and (parent, rank[c] - 1) not in kept_rank:
                continue
            keep.add(c)
            kept_rank.add((parent, rank[c]))
        tree = grown.subset(keep)
        tree.q = torch.stack([rows[i] for i in tree.drafted_as])
        return tree


class DrawnSage(TreePolicy):
    """The former SAGE sampling construction at fixed width: W draws at level 1, then
    round(W / l (0.5 + P_parent)) per node, each kept while its path probability exceeds
    0.1 l / D (the first level-1 draw always)."""

    def __init__(self, depth=2, width=2):
        self.depth, self.width = depth, width

    def propose(self, drafter, sampler, room):
        tree, prob, rows = Proposal(), [], []

        def add(q, parent, level):
            p_parent = 1.0 if parent == ROOT else prob[parent]
            k = self.width if level == 1 else max(1, round(self.width / level * (0.5 + p_parent)))
            added = []
            for r, t in enumerate(draws_without_replacement(q, k, sampler)):
                p = p_parent * float(q[t])
                if p <= 0.1 * level / self.depth and not (level == 1 and r == 0):
                    break
                added.append(tree.add(t, parent))
                prob.append(p)
                rows.append(q)
            return added

        level = add(drafter.root(sampler), ROOT, 1)
        for lvl in range(2, self.depth + 1):
            if not level:
                break
            nxt = []
            for c, q in zip(level, drafter.expand(tree, level), strict=True):
                nxt += add(q, c, lvl)
            level = nxt
        tree.q = torch.stack(rows)
        return tree


def recursive_residual_rule(proposal, logits, temperature, sampler):
    """The former tree rule: children taken as draws from q without replacement; after rejecting
    x, p <- norm(max(0, p - q)) and q <- q without x, renormalised."""
    p_rows = distribution(logits, temperature)
    children, path, node = proposal.children(), [], ROOT
    while True:
        p, accepted = p_rows[node + 1], None
        kids = children.get(node, [])
        q = proposal.q[kids[0]].to(p.dtype) if kids else None
        for child in kids:
            token = proposal.tokens[child]
            if sampler.accept(min(1.0, float(p[token] / q[token]))):
                accepted = child
                break
            residual = (p - q).clamp_min(0)
            p = residual / residual.sum() if residual.sum() > 0 else p
            q = q.clone()
            q[token] = 0
            if q.sum() <= 0:
                break
            q = q / q.sum()
        if accepted is None:
            return path, sampler.categorical(p)
        path.append(accepted)
        node = accepted


def tvd(seed: int, policy, rule, spec_name: str) -> float:
    verify.WORDS = ["<unk>", "<image>", "a", "b"]
    tokenizer = verify.build_tokenizer()
    target, draft = verify.build_models(seed, tokenizer)
    generator = torch.Generator().manual_seed(seed)
    sample = Sample(
        "a b <image> a",
        verify.random_images(target, generator),
        verify.random_images(draft, generator),
    )
    spec = registry.resolve(spec_name, {"acceptance": "sampling", "temperature": 1.0})
    runner = MethodRunner(spec, target, draft, tokenizer, "<image>")
    fork = Forker([target, draft])
    prompt, draft_prompts, score_visual = runner.speculative_inputs(sample)

    def start(sampler):
        return Speculation(
            fork(runner.target), fork(runner.drafter), policy, rule or runner.rule, 1.0, sampler
        )

    got = speculative_distribution(start, prompt, draft_prompts, 2, fork, score_visual)
    return total_variation(got, target_distribution(fork(runner.target), prompt, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [
        ("EAGLE-2, drawn + reranked (former)", DrawnDynamic(), recursive_residual_rule),
        ("EAGLE-2, top-k + point masses (now)", DynamicTree(1, 2, 3), None),
        ("SAGE, drawn + thresholded (former)", DrawnSage(), recursive_residual_rule),
        ("SAGE, top-k + point masses (now)", SageTree(1, 2, 2, 2, n_max=8), None),
    ]
    print(f"{'construction':<38} " + " ".join(f"seed {s:>2}" for s in args.seeds))
    for name, policy, rule in rows:
        values = [tvd(s, policy, rule, "eagle2_tree") for s in args.seeds]
        print(f"{name:<38} " + " ".join(f"{v:7.2e}" for v in values))


if __name__ == "__main__":
    main()
