"""LANTERN on the toy image world: mean accepted length, speedup, FID and CLIP score of plain
speculative decoding and LANTERN's relaxation over a grid of k and delta, against AR, with
classifier-free guidance on both models (the paper's Table 3 and Figure 5 in miniature).

    python benchmarks/bench_lantern.py --target T --draft D --features F --clip C

T and D are toy image generators (toy.imagegen, sharing a codebook), F the FID feature
network and C the CLIP (toy.image_nets). Every setting draws one image per held-out
caption; FID compares them with textured references of other scenes, CLIP score with their
captions. Times are one process's, setting after setting: quote ratios, not seconds.
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse

import numpy as np
import torch

from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.guidance import GuidedDecoder
from mmspec.decoding.loops import decode_ar, decode_speculative
from mmspec.decoding.sampler import seeded
from mmspec.decoding.trees import ChainPolicy
from mmspec.methods.registry import resolve
from mmspec.models import loading
from mmspec.scoring import image_metrics
from mmspec.toy import imagegen as toy_imagegen
from mmspec.toy import world as toyworld
from mmspec.toy.vq import PatchVQ


class Generator:
    def __init__(self, args):
        load = lambda ref: loading.load_model(ref, torch.device("cpu"), "float32")  # noqa: E731
        self.target, self.draft = load(args.target), load(args.draft)
        self.tokenizer = loading.load_processor(args.target)
        self.meta = toy_imagegen.ImageGenMeta.load(args.target)
        self.vq = PatchVQ.load(args.target)
        if not torch.equal(self.vq.codebook, PatchVQ.load(args.draft).codebook):
            raise SystemExit(f"{args.target} and {args.draft} do not share a VQ codebook")
        self.codebook = toy_imagegen.codebook_of(args.target)
        self.cfg, self.gamma = args.cfg, args.gamma

    def guided(self, model) -> GuidedDecoder:
        return GuidedDecoder(Decoder(model), self.cfg, self.meta.code_range)

    def prompts(self, decoder: GuidedDecoder, caption: str) -> list[torch.Tensor]:
        ids = self.meta.guided_prompts(self.tokenizer, caption)
        return [decoder.embed(torch.tensor(i)).detach() for i in ids]

    def run(self, caption: str, rule, temperature: float, seed: int):
        """One image: (codes, decode seconds, verification steps, emitted draft tokens)."""
        target = self.guided(self.target)
        sampler = seeded(seed) if temperature > 0 else None
        prompt, grid = self.prompts(target, caption), self.meta.grid
        if rule is None:
            out = decode_ar(target, prompt, grid, set(), temperature, sampler)
            return out.tokens, out.decode_s, len(out.steps), 0
        draft = self.guided(self.draft)
        out = decode_speculative(
            target,
            prompt,
            ModelDrafter(draft, temperature),
            self.prompts(draft, caption),
            ChainPolicy(self.gamma),
            rule,
            grid,
            set(),
            temperature,
            sampler,
        )
        return out.tokens, out.decode_s, len(out.steps), sum(s.accepted for s in out.steps)

    def images(self, codes: list[list[int]]) -> np.ndarray:
        grids = torch.tensor(codes) - self.meta.code_offset
        return self.vq.decode(grids)


def settings(temperature: float, ks, deltas):
    base = "greedy" if temperature == 0 else "sampling"
    yield "AR", None
    yield "SD", resolve("sd_chain", {"acceptance": base}).part("acceptance").build()
    for k in ks:
        for delta in deltas:
            hparams = {"acceptance": "lantern", "lantern_k": k, "lantern_delta": delta}
            yield f"LANTERN k={k} d={delta}", {**hparams, "temperature": temperature}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("target", "draft", "features", "clip"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--references", type=int, default=300)
    p.add_argument("--cfg", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0, help="draws the captions and references")
    p.add_argument("--gamma", type=int, default=5)
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    p.add_argument("--k", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--delta", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.4])
    args = p.parse_args()
    torch.set_num_threads(1)
    gen = Generator(args)
    features = image_metrics.feature_network(args.features)
    scorer = image_metrics.clip_scorer(args.clip)
    captions = [c for c, _ in toyworld.imagegen_examples(args.samples, args.seed, stream=7)]
    references = np.stack(
        [img for _, img in toyworld.imagegen_examples(args.references, args.seed, stream=8)]
    )
    head = f"{'T':>4s} {'setting':22s} {'tau':>5s} {'speedup':>7s} {'FID':>7s} {'CLIP':>6s}"
    print(head)
    for temperature in args.temperatures:
        ar_seconds = None
        for name, rule in settings(temperature, args.k, args.delta):
            if isinstance(rule, dict):
                rule = resolve("sd_chain", rule).part("acceptance").build(codebook=gen.codebook)
            runs = [
                gen.run(c, rule, temperature, seed=args.seed * len(captions) + i)
                for i, c in enumerate(captions)
            ]
            codes = [r[0] for r in runs]
            seconds = sum(r[1] for r in runs)
            steps, accepted = sum(r[2] for r in runs), sum(r[3] for r in runs)
            ar_seconds = ar_seconds or seconds
            images = gen.images(codes)
            fid = image_metrics.fid(references, images, features)
            clip = float(np.mean(image_metrics.clip_score(images, captions, scorer)))
            tau = (steps + accepted) / steps
            print(
                f"{temperature:4.1f} {name:22s} {tau:5.2f} {ar_seconds / seconds:7.2f} "
                f"{fid:7.2f} {clip:6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
