"""DREAM (its tree: k 4, depth 6, 32 tokens) and its ablations (Sections 4.1-4.2), as its release
(SAI-Lab-NYU/DREAM) builds, trains and drafts: the head of `model/cnets.py` `Model` (l. 650-825:
a decoder block over token embeddings alone, l. 768; a cross-attention block over the target's
raw features, l. 472-648; a decoder block; a norm), drafting as its `topK_genrate` (l. 831-1009:
a node fed its embedding, its parent's output appended to the memory, l. 876, 886, 910),
intermediate features hidden_states[l] scored by attentions[l]
(`ge_data/ge_data_all_llava_mix665k.py` `mid_feature_collect`, l. 124-145) and the loss weighting
of `train/main_deepspeed.py` (l. 222-236, 312: 0.2 x feature, 1.0 x intermediate over all padded
positions, 1.0 x the KL's mean over the vocabulary; `dream_loss: paper` is Section 4.1's 0.2,
0.2, 1.0). VTC is mmspec's (the release's call is commented out, `model/utils.py` l. 308):
docs/papers/dream.md.
"""

from __future__ import annotations

from mmspec.methods.rows.row import HEAD, Method

DREAM = {
    **HEAD,
    "drafter": "dream",
    "tree": "dynamic",
    "depth": 6,
    "top_k": 4,
    "total_tokens": 32,
}

ROWS = [
    Method(
        "dream",
        "DREAM: a decoder block over token embeddings, gated cross-attention over the "
        "target's verified features (75% of the visual tokens kept) and the drafted path's "
        "outputs, a decoder block; trained with the intermediate feature of the "
        "lowest-entropy layer per token and the release's loss weighting",
        DREAM,
        "DREAM",
    ),
    Method(
        "dream_nocross",
        "DREAM without its cross-attention block (Table 2's w/o CA): the target's features "
        "then never reach the head, two decoder blocks over token embeddings",
        {**DREAM, "dream_cross": False},
        "DREAM w/o CA",
    ),
    Method(
        "dream_fixed",
        "DREAM with the intermediate feature of a fixed layer, at the share "
        "`dream_fixed_depth` of the target's depth: half by default (Figure 4a's "
        "Static-50%; Section 4.2 also runs 25% and 75%, its strongest static setting). The "
        "release has no fixed-layer mode (ge_data `mid_feature_collect` picks by entropy "
        "only): the layer is hidden_states[floor(share x layers)], the paper's wording",
        {**DREAM, "dream_intermediate": "fixed"},
        "DREAM (S-50%)",
    ),
    Method(
        "dream_nointer",
        "DREAM without intermediate feature distillation (Figure 4a's No Mid)",
        {**DREAM, "dream_intermediate": "none"},
        "DREAM (no mid)",
    ),
    Method(
        "dream_paperloss",
        "DREAM trained with the paper's loss weights (Section 4.1: 0.2 feature, 0.2 "
        "intermediate, 1.0 KL summed over the vocabulary, on the answer positions) in place "
        "of its release's (train/main_deepspeed.py)",
        {**DREAM, "dream_loss": "paper"},
        "DREAM (paper loss)",
    ),
]
