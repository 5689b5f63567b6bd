"""Tree verification costs one target forward: its time for a 25-node tree vs a 6-token chain.

Times the target's verification forward (`Decoder.extend` of the root token plus the proposal,
with the tree attention mask and tree position ids for the tree) after a real prompt prefill:

  chain_6   root + 6 chained draft tokens (7 positions, causal)
  tree_25   root + a 25-node static tree of depth 6 (26 positions, tree mask)

and counts, in full greedy decodes of the toy pair with that tree (`ModelDrafter`, static tree),
the target forwards per verification step (every forward of the target's `Decoder`, the lean
one or transformers', counted; the prefill is excluded). Models: the trained toy target
(`--target`, default results/models/toy/target) and, with `--mid`, a random Llama of hidden
1024 x 8 layers whose forward is less dominated by per-call overhead. Median over `--repeats`
timings, orders alternated; ratios from one run.

    python benchmarks/bench_tree_verify.py --threads 1 --json bench_tree_verify.json
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.decoder import Decoder
from mmspec.decoding.drafters.model import ModelDrafter
from mmspec.decoding.loops import decode_speculative
from mmspec.decoding.proposal import Proposal
from mmspec.decoding.timing import describe_device, pick_device, sync, versions
from mmspec.decoding.trees import StaticTree
from mmspec.models import loading

# 25 nodes, depth 6: 4 / 6 / 4 / 5 / 5 / 1 nodes per level
TREE_25 = [
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
    (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 1, 0), (0, 0, 1, 0, 0), (0, 1, 0, 0, 0),
    (0, 0, 0, 0, 0, 0),
]  # fmt: skip


def mid_model(vocab: int, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device).eval()


def verify_times(model, prompt_len: int, repeats: int, device) -> dict:
    tree = StaticTree(TREE_25)
    proposals = {
        "chain_6": Proposal.chain([5] * 6),
        "tree_25": Proposal([5] * len(tree), list(tree.parents)),
    }
    decoder = Decoder(model)
    embeds = model.get_input_embeddings()(torch.arange(prompt_len, device=device) % 50 + 6)
    with torch.inference_mode():
        decoder.prefill(embeds.detach())
    base = decoder.length
    times = {name: [] for name in proposals}
    for r in range(repeats + 3):
        order = list(proposals) if r % 2 == 0 else list(proposals)[::-1]
        for name in order:
            p = proposals[name]
            sync(device)
            start = time.perf_counter()
            decoder.extend([7] + p.tokens, p.attention())
            sync(device)
            if r >= 3:  # the first rounds warm up
                times[name].append(time.perf_counter() - start)
            decoder.truncate(base)
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "median_verify_ms": {k: v * 1e3 for k, v in median.items()},
        "tree_25_over_chain_6": median["tree_25"] / median["chain_6"],
    }


class CountingDecoder(Decoder):
    """A `Decoder` that counts its forwards: the prefill and every extension run `_run` once,
    whichever forward (the lean one or transformers') computes them."""

    def __init__(self, model):
        super().__init__(model)
        self.forwards = 0

    def _run(self, *args, **kwargs):
        self.forwards += 1
        return super()._run(*args, **kwargs)


def forwards_per_step(target, draft, tokenizer, device, n_samples: int) -> dict:
    """Greedy decodes with the 25-node tree: target forwards per verification step."""
    steps = forwards = 0
    for i in range(n_samples):
        ids = (
            tokenizer(
                f"<bos> user : describe the image . assistant : a{' .' * i}",
                return_tensors="pt",
            )
            .input_ids[0]
            .to(device)
        )
        prompt_t = target.get_input_embeddings()(ids).detach()
        prompt_d = draft.get_input_embeddings()(ids).detach()
        counting = CountingDecoder(target)
        out = decode_speculative(
            counting,
            prompt_t,
            ModelDrafter(Decoder(draft), 0.0),
            [prompt_d],
            StaticTree(TREE_25),
            accept_greedy,
            40,
            set(),
            0.0,
            None,
        )
        steps += len(out.steps)
        forwards += counting.forwards - 1  # minus the prefill
    return {"steps": steps, "target_forwards": forwards, "per_step": forwards / steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="results/models/toy/target")
    parser.add_argument("--draft", default="results/models/toy/draft")
    parser.add_argument("--mid", action="store_true", help="also a random 1024 x 8 Llama")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = pick_device()
    target = loading.load_model(args.target, device)
    draft = loading.load_model(args.draft, device)
    tokenizer = loading.tokenizer_of(loading.load_processor(args.target))
    result = {"device": describe_device(device), "versions": versions(), "threads": args.threads}
    result["toy_target"] = verify_times(target, args.prompt_len, args.repeats, device)
    if args.mid:
        vocab = target.get_output_embeddings().out_features
        result["mid_1024x8"] = verify_times(
            mid_model(vocab, device), args.prompt_len, args.repeats, device
        )
    result["forwards_per_step"] = forwards_per_step(target, draft, tokenizer, device, args.samples)
    for name in ("toy_target", "mid_1024x8"):
        if name in result:
            ms = result[name]["median_verify_ms"]
            print(
                f"{name}: chain_6 {ms['chain_6']:.2f} ms, tree_25 {ms['tree_25']:.2f} ms, "
                f"ratio {result[name]['tree_25_over_chain_6']:.2f}"
            )
    f = result["forwards_per_step"]
    print(f"target forwards per step: {f['per_step']:.3f} ({f['target_forwards']} / {f['steps']})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if f["target_forwards"] == f["steps"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
