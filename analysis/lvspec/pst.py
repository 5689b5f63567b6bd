"""Where LVSpec's position-shift tolerance (PST, Section 3.3) acts in the toy video descriptions.

LVSpec with PST decodes a toy_vdesc dataset through the generate stage's own code, with its rule
wrapped to record every rejection the walk meets (a drafted token the target does not take):

- `loose`: the position is among the floor(lambda K) least visually relevant ones, so LVSpec
  relaxes it with or without PST;
- `pst`: a strict position whose target token appears among the step's drafted tokens, which
  PST alone accepts (the draft's token stays);
- `stop`: a strict position PST does not rescue; the target's token is emitted.

Each kind is split by whether the target's token or the drafted token states visual content
(`toyworld.VISUAL_WORDS`). PST can add speed only through `pst` rejections; where those are
visual words, what it accepts is a visual word the target did not choose.

Run after the toy_lvspec preset (it reads its prepared data, visual caches and models):

    python analysis/lvspec/pst.py [--dataset vdesc_2000] [--target vtarget --draft vdraft]
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
from collections import Counter
from pathlib import Path

from oracle import decode, visual_ids

from mmspec.decoding import acceptance
from mmspec.decoding.acceptance.loose import Walk, loosened, visual_relevance, walk_loosely
from mmspec.methods import registry
from mmspec.models import loading


def recording_rule(visual_ids: set[int], share: float, n: int, counts: Counter):
    """LVSpec's rule with PST (as `loose.accept_lvspec`), counting each rejection by kind."""

    def judge(proposal, logits, temperature, sampler, *, hidden, visual):
        walk = Walk(proposal, logits, temperature, sampler)
        loose = loosened(visual_relevance(hidden, visual, n), share)
        drafted = set(proposal.tokens)

        def relaxes(walk, parent, child):
            target_token = walk.rejected(parent)
            if child in loose:
                kind = "loose"
            elif target_token in drafted:
                kind = "pst"
            else:
                kind = "stop"
            seen = (target_token in visual_ids) or (proposal.tokens[child] in visual_ids)
            counts[kind, "visual" if seen else "non-visual"] += 1
            return kind != "stop"

        return walk_loosely(walk, relaxes)

    return acceptance.AcceptanceRule("lvspec", judge, lossless=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", type=Path)
    parser.add_argument("--dataset", default="toy_vdesc", help="a toy_vdesc dataset of the run")
    parser.add_argument("--target", default="vtarget")
    parser.add_argument("--draft", default="vdraft")
    parser.add_argument("--lam", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    model = args.results / "models" / "toy" / args.target
    tokenizer = loading.tokenizer_of(loading.load_processor(str(model)))
    counts = Counter()
    n = registry.resolve("lvspec", {})["lvspec_n"]
    rule = recording_rule(visual_ids(tokenizer), args.lam, n, counts)
    hparams = {"views": "M", "lvspec_lambda": args.lam}
    tau, quality = decode(
        args.results, args.dataset, args.threads, "lvspec", hparams, rule, args.target, args.draft
    )
    print(
        f"LVSpec lambda {args.lam} with PST on {args.dataset}: tau {tau:.2f}, rubric {quality:.3f}"
    )
    total = sum(counts.values())
    print(f"{'rejection':10s} {'visual':>8s} {'non-visual':>11s} {'share':>7s}")
    for kind in ("loose", "pst", "stop"):
        v, o = counts[kind, "visual"], counts[kind, "non-visual"]
        print(f"{kind:10s} {v:8d} {o:11d} {(v + o) / max(total, 1):7.3f}")


if __name__ == "__main__":
    main()
