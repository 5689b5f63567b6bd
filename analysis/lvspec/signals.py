"""Which answer tokens need the video, and which signal finds them (LVSpec's Section 2 and 3.1)
in the toy world: teacher-forced on held-out toy_vdesc descriptions, the target's

- oracle split: the share of answer tokens that state visual content (colours, shapes, corners,
  counts, moves/stays; `toyworld.VISUAL_WORDS`), the rest being grammar and fillers;
- LVSpec's visual relevance of each token (mean of the top-N cosine similarities between its
  last-layer hidden state and the visual tokens'), and how well it ranks visual tokens above the
  others: the AUC over all tokens, and, as LVSpec uses it, within windows of K consecutive
  tokens, the share of the floor(lambda K) least relevant that are not visual;
- FLy's gate signal (entropy of the target's top-3 probabilities at the position predicting the
  token): the AUC of ranking non-visual tokens above visual ones (a mismatch there is what the
  gate lets through).

    python analysis/lvspec/signals.py --model results/models/toy/vtarget --style a

`--style` writes the descriptions' fillers in a house style (toyworld.HOUSE_STYLES; the
target's own in toy_lvspec.yaml), else uniformly.
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import math

import numpy as np
import torch

from mmspec.decoding.acceptance.loose import top_entropy, visual_relevance
from mmspec.models import loading
from mmspec.toy import processor as toy_processor
from mmspec.toy import training as toy_training
from mmspec.toy import world as toyworld


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(a positive scores above a negative), ties counting half (Mann-Whitney)."""
    above = (positive[:, None] > negative[None, :]).mean()
    ties = (positive[:, None] == negative[None, :]).mean()
    return float(above + ties / 2)


@torch.inference_mode()
def signals(folder: str, n: int, seed: int, top_n: int, style: str | None = None):
    """Per answer token: (is visual, relevance, FLy entropy); per sample: its windows' tokens."""
    model = loading.load_model(folder, torch.device("cpu"), "float32")
    tokenizer = loading.tokenizer_of(loading.load_processor(folder))
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    rows = []
    for turns in toyworld.training_turns(["toy_vdesc"], n, seed, style):
        messages, images = toyworld.training_example(turns)
        ids, labels = toy_training.encode_example(messages, tokenizer, text_only=False)
        out = model(
            input_ids=torch.tensor([ids]),
            pixel_values=toy_processor.pixel_values(np.stack(images)),
            output_hidden_states=True,
        )
        hidden, logits = out.hidden_states[-1][0], out.logits[0]
        visual = hidden[torch.tensor(ids) == image_id]
        answer = [t for t in range(1, len(ids)) if labels[t] != toy_training.IGNORE]
        answer = [t for t in answer if tokenizer.convert_ids_to_tokens(ids[t]) != "<eos>"]
        words = tokenizer.convert_ids_to_tokens([ids[t] for t in answer])
        relevance = visual_relevance(hidden[answer], visual, top_n)
        entropy = top_entropy(logits[[t - 1 for t in answer]])
        rows.append(
            (
                np.array([w in toyworld.VISUAL_WORDS for w in words]),
                relevance.numpy(),
                entropy.numpy(),
            )
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a target trained on toy_vdesc")
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--top-n", type=int, default=10)
    p.add_argument("--k", type=int, default=10, help="draft tokens per step")
    p.add_argument("--share", type=float, default=0.7, help="lambda")
    p.add_argument("--style", choices=sorted(toyworld.HOUSE_STYLES), help="fillers' house style")
    args = p.parse_args()
    rows = signals(args.model, args.samples, args.seed, args.top_n, args.style)
    is_visual = np.concatenate([r[0] for r in rows])
    relevance = np.concatenate([r[1] for r in rows])
    entropy = np.concatenate([r[2] for r in rows])
    loosened, ceiling = [], []
    budget = math.floor(args.share * args.k + 1e-9)
    for vis, rel, _ in rows:
        for start in range(0, len(vis) - args.k + 1, args.k):
            window = slice(start, start + args.k)
            low = np.argsort(rel[window], kind="stable")[:budget]
            loosened.extend(~vis[window][low])
            # a perfect ranking's: the window's non-visual tokens fill the budget first
            ceiling.append(min(budget, int((~vis[window]).sum())) / budget)
    print(f"answer tokens: {len(is_visual)} in {len(rows)} descriptions")
    print(f"oracle split: visual-relevant share {is_visual.mean():.3f}")
    print(
        f"LVSpec relevance (top-{args.top_n} cosine): visual {relevance[is_visual].mean():.3f}, "
        f"other {relevance[~is_visual].mean():.3f}; "
        f"AUC visual above other {auc(relevance[is_visual], relevance[~is_visual]):.3f}"
    )
    print(
        f"  within windows of K={args.k}: share of the floor({args.share}K) least relevant "
        f"that are not visual {np.mean(loosened):.3f} (chance {(~is_visual).mean():.3f}, "
        f"a perfect ranking {np.mean(ceiling):.3f})"
    )
    print(
        f"FLy top-3 entropy (nats): visual {entropy[is_visual].mean():.3f}, "
        f"other {entropy[~is_visual].mean():.3f}; "
        f"AUC other above visual {auc(entropy[~is_visual], entropy[is_visual]):.3f}"
    )
    for threshold in (0.05, 0.1, 0.15, 0.2):
        gate = entropy >= threshold
        print(
            f"  gate {threshold}: passes {gate[~is_visual].mean():.3f} of other tokens and "
            f"{gate[is_visual].mean():.3f} of visual ones"
        )


if __name__ == "__main__":
    main()
