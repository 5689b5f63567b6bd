"""Draft confidence along the outputs (SAGE's Figure 2): is alpha of one position a forecast of
the next ones?

SAGE shapes the tree of step t+1 by the confidence alpha = 1 - H(top-k)/log k of step t, which
pays off where alpha is autocorrelated. For each toy dataset this decodes every sample greedily
with the target (AR), runs the draft over the prompt (view M) and that output (teacher forcing),
and reports per dataset: the mean alpha (k = 10), the Pearson correlation of alpha at positions t
and t + lag within a sample (pooled over samples) for lags 1, 2, 4, and the share of positions
where the draft's argmax is the target's token. Needs a finished default run (trained toy models,
prepared datasets and visual caches under results/).

    python analysis/sage/draft_confidence.py --datasets toy_caption toy_video --json entropy.json
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json

import numpy as np
import torch

from mmspec.decoding.decoder import Decoder
from mmspec.decoding.loops import decode_ar
from mmspec.decoding.trees import SageTree
from mmspec.decoding.views import FullView, ViewContext
from mmspec.models import loading
from mmspec.stages.generate import ImageStore, stop_tokens
from mmspec.storage.tables import PREPARED, read_table


def alphas(
    draft: Decoder, prompt: torch.Tensor, tokens: list[int], k: int
) -> tuple[list[float], torch.Tensor]:
    """The draft's alpha before each of `tokens` (reading the prompt and the tokens before) and
    its argmax there."""
    sage = SageTree(k=k)
    first = draft.prefill(prompt).logits[0]
    rest = draft.extend(tokens[:-1]).logits[0] if len(tokens) > 1 else first[:0]
    logits = torch.cat([first[None], rest])
    return [sage.confidence(torch.softmax(row.float(), -1)) for row in logits], logits.argmax(-1)


def lag_correlation(series: list[list[float]], lag: int) -> float:
    pairs = [(s[t], s[t + lag]) for s in series for t in range(len(s) - lag)]
    if len(pairs) < 3:
        return float("nan")
    a, b = np.array(pairs).T
    return float(np.corrcoef(a, b)[0, 1])


@torch.inference_mode()
def analyze(dataset: str, target, draft, processor, max_new: int, k: int) -> dict:
    tokenizer = loading.tokenizer_of(processor)
    image_token = loading.image_token_of(processor)
    t_dec, d_dec = Decoder(target), Decoder(draft)
    t_ctx = ViewContext(tokenizer, t_dec.embed, image_token)
    d_ctx = ViewContext(tokenizer, d_dec.embed, image_token)
    t_store = ImageStore(f"results/visual/toy-target/{dataset}.parquet")
    d_store = ImageStore(f"results/visual/toy-draft/{dataset}.parquet")
    stop = stop_tokens(target, tokenizer)
    series, hits = [], []
    for row in read_table(f"results/prepared/{dataset}.parquet", PREPARED).to_pylist():
        messages = json.loads(row["messages"])
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        t_prompt = FullView().build(text, t_store.images(row["image_ids"]), t_ctx).embeds
        d_prompt = FullView().build(text, d_store.images(row["image_ids"]), d_ctx).embeds
        tokens = decode_ar(t_dec, t_prompt, max_new, stop, 0.0, None).tokens
        values, argmax = alphas(d_dec, d_prompt, tokens, k)
        series.append(values)
        hits += (argmax.cpu() == torch.tensor(tokens)).tolist()
    flat = [a for s in series for a in s]
    return {
        "dataset": dataset,
        "samples": len(series),
        "positions": len(flat),
        "alpha_mean": float(np.mean(flat)),
        "lag_correlation": {lag: lag_correlation(series, lag) for lag in (1, 2, 4)},
        "draft_argmax_matches": float(np.mean(hits)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["toy_caption", "toy_video"])
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    processor = loading.load_processor("toy:target")
    target = loading.load_model("toy:target", device)
    draft = loading.load_model("toy:draft", device)
    results = [analyze(d, target, draft, processor, args.max_new, args.k) for d in args.datasets]
    for r in results:
        lags = "  ".join(f"lag {lag}: {c:+.2f}" for lag, c in r["lag_correlation"].items())
        print(
            f"{r['dataset']:14s} alpha {r['alpha_mean']:.2f}  {lags}  "
            f"draft argmax = target {r['draft_argmax_matches']:.2f}  ({r['positions']} positions)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
