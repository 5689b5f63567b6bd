"""Is the toy video world fit for LVSpec's phenomenon? Loose verification with an ORACLE visual
relevance (LVSpec's Section 2 premise: relaxing visual-irrelevant tokens is harmless) against the
same decoding with LVSpec's measured relevance and with blind random relaxation.

The oracle rule relaxes a mismatch when the drafted token and the target's token are both non-visual
words (`toyworld.VISUAL_WORDS`: colours, shapes, corners, counts, moves/stays): the premise itself,
without LVSpec's budget. LVSpec with a perfect relevance keeps LVSpec's budget (the floor(lambda K)
least relevant of the step's K drafted positions may mismatch) but ranks the drafted tokens by the
oracle split (visual words above the rest, LVSpec's own relevance breaking ties): the ceiling of
LVSpec's rule on this world, where a step whose drafted tokens hold more than K - floor(lambda K)
visual words must relax some. The draft decoding alone is the far end (lambda 1 comes close: every
drafted position may mismatch). Both rules exist only here, as diagnostics. Each rule decodes the
same prepared samples through the generate stage's own code, and is scored with the toy rubric
against the AR cell. The two rules are components of this script's own (registered in the catalog
as a plugin's would be), named in the spec like any rule.

Run after the toy_lvspec preset (it reads its prepared data, visual caches and models):

    python analysis/lvspec/oracle.py --rho 0.5 --lam 0.7 [--dataset vdesc_2000]
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import torch

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.loose import (
    LVSpec,
    Walk,
    loosened,
    visual_relevance,
    walk_loosely,
)
from mmspec.decoding.acceptance.rule import Rule
from mmspec.methods import registry
from mmspec.models import loading
from mmspec.stages import generate
from mmspec.toy import world as toyworld
from mmspec.toy.quality import score_rows

PAIR = {"target": "toy:vtarget", "draft": "toy:vdraft", "dtype": "float32"}


class Oracle(Rule):
    """Relax a mismatch where neither the drafted nor the target's token states visual content."""

    name = "oracle_nonvisual"
    visual: set[int] = set()  # the visual words' ids (set by `register`)

    @classmethod
    def judge(cls, proposal, logits, temperature, sampler):
        walk = Walk(proposal, logits, temperature, sampler)

        def relaxes(walk, parent, child):
            return (
                proposal.tokens[child] not in cls.visual and walk.rejected(parent) not in cls.visual
            )

        return walk_loosely(walk, relaxes)


class PerfectlyRanked(Rule):
    """LVSpec's rule (Eqs. 9-10, without PST) over the oracle split's ranking (visual words above
    the rest, LVSpec's own relevance breaking ties); it reads the target's states as LVSpec."""

    name = "lvspec_perfect_relevance"
    params = tuple(p for p in LVSpec.params if p.key in ("lvspec_lambda", "lvspec_n"))
    requires = LVSpec.requires
    visual: set[int] = set()

    @classmethod
    def judge(
        cls, proposal, logits, temperature, sampler, *, lvspec_lambda, lvspec_n, hidden, visual
    ):
        walk = Walk(proposal, logits, temperature, sampler)
        measured = visual_relevance(hidden, visual, lvspec_n).cpu()  # within [-1, 1]: ties
        split = torch.tensor([4.0 * (t in cls.visual) for t in proposal.tokens])
        loose = loosened(split + measured, lvspec_lambda)
        return walk_loosely(walk, lambda walk, parent, child: child in loose)


def register(tokenizer) -> None:
    """Add the two rules to the catalog, knowing the toy world's visual words."""
    Oracle.visual = PerfectlyRanked.visual = visual_ids(tokenizer)
    catalog.register(Oracle)
    catalog.register(PerfectlyRanked)


def visual_ids(tokenizer) -> set[int]:
    words = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return {i for i, w in enumerate(words) if w in toyworld.VISUAL_WORDS}


def decode(
    results: Path,
    dataset: str,
    threads: int,
    method: str,
    hparams: dict,
    target="vtarget",
    draft="vdraft",
) -> tuple[float, float]:
    """(tau, rubric quality) of one rule over a toy_vdesc dataset of the preset."""
    spec = registry.resolve(method, {**hparams, "temperature": 0.0})
    params = {
        "cell": {
            "dataset": dataset,
            "pair": "p",
            "method": method,
            "hp": "h",
            "seed": 0,
            "spec": spec,
        },
        "pair": {
            **PAIR,
            "target": str(results / f"models/toy/{target}"),
            "draft": str(results / f"models/toy/{draft}"),
        },
        "task": "answer",
        "generation": {"max_new_tokens": 96, "cfg": 3.0, "top_k": 0},
        "timing": {"warmup_samples": 0, "threads": threads},
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/samples.parquet"
        visual = str(results / f"visual/toy-{target}/{dataset}.parquet")
        draft_visual = str(results / f"visual/toy-{draft}/{dataset}.parquet")
        generate.run(
            params, str(results / f"prepared/{dataset}.parquet"), visual, draft_visual, out
        )
        rows = pq.read_table(out).to_pylist()
    prepared = {
        r["sample_id"]: r
        for r in pq.read_table(results / f"prepared/{dataset}.parquet").to_pylist()
    }
    for r in rows:
        r["reference"], r["scenario"] = prepared[r["sample_id"]]["reference"], "toy_vdesc"
    tau = sum(r["n_tokens"] - 1 for r in rows) / sum(len(r["step_accepted"]) for r in rows)
    quality = sum(score_rows(rows)) / len(rows)
    return tau, quality


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results")
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--lam", type=float, default=0.7)
    parser.add_argument("--dataset", default="toy_vdesc", help="a toy_vdesc dataset of the run")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    results = Path(args.results)
    register(loading.tokenizer_of(loading.load_processor(str(results / "models/toy/vtarget"))))
    lvspec = {"views": "M", "lvspec_lambda": args.lam}
    runs = {
        "AR": ("ar", {}),
        "draft alone (AR)": ("ar", {}, "vdraft", "vdraft"),
        "SD (K=10)": ("sd_chain", {"gamma": 10, "views": "M"}),
        f"LVSpec lambda {args.lam} (w/o PST)": ("lvspec_nopst", lvspec),
        f"LVSpec lambda {args.lam}, perfect relevance": (
            "sd_chain",
            {"gamma": 10, **lvspec, "acceptance": PerfectlyRanked.name},
        ),
        f"random rho {args.rho}": ("random_relax", {"views": "M", "relax_rho": args.rho}),
        "oracle (non-visual tokens)": (
            "sd_chain",
            {"gamma": 10, "views": "M", "acceptance": Oracle.name},
        ),
    }
    measured = {
        name: decode(results, args.dataset, args.threads, *run) for name, run in runs.items()
    }
    ar_quality = measured["AR"][1]
    print(f"{'rule':44s} {'tau':>6s} {'quality':>8s} {'retention':>9s}")
    for name, (tau, quality) in measured.items():
        print(f"{name:44s} {tau:6.2f} {quality:8.3f} {quality / ar_quality:9.3f}")


if __name__ == "__main__":
    main()
