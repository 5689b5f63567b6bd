"""SpecVLM's pruned view (its release's `utils/utils.py`, `drop_visual_tokens_specvlm`) and
SAGE's entropy-adaptive trees, drafted from that view and, as an ablation, from the full view."""

from __future__ import annotations

from mmspec.decoding.trees import EAGLE_TREE
from mmspec.methods.rows.row import drafting

SPECVLM = drafting(
    "specvlm",
    "SpecVLM",
    "SpecVLM: the draft reads only the visual tokens kept by the target's "
    "text-to-visual attention (view S: top tokens up to `mass` of the attention, the "
    "rest of the budget int(N (1 - drop)) uniform; its release's `utils/utils.py`, "
    "`drop_visual_tokens_specvlm`) and drafts EAGLE's 25-node static tree",
    views="S",
    tree="static",
    paths=EAGLE_TREE,
)

SAGE = drafting(
    "sage",
    "SAGE",
    "SAGE: entropy-adaptive trees (depth and width from the draft's confidence, history "
    "tracking of accepted lengths; EAGLE's 25-node tree on the first step) drafted from "
    "SpecVLM's pruned view S",
    views="S",
    tree="sage",
)

SAGE_TREE = drafting(
    "sage_tree",
    "SAGE trees (M)",
    "SAGE's entropy-adaptive trees drafted from the full view M (an ablation of `sage`, "
    "which drafts from SpecVLM's pruned view S)",
    tree="sage",
)
