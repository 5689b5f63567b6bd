"""AR, plain speculative decoding, and the draft-model baselines the papers compare with: SPD
(DREAM's Table 1), SD-chain and SD-Tree (the tree papers': EAGLE's 25-node tree, as in SAGE and
SpecVLM), and a draft model growing EAGLE-2's dynamic trees."""

from __future__ import annotations

from mmspec.decoding.trees import EAGLE_TREE
from mmspec.methods.components import AR
from mmspec.methods.rows.row import Method, drafting

AUTOREGRESSIVE = Method(
    "ar",
    "autoregressive decoding with the target alone (the baseline of every speedup)",
    {"drafter": AR},
    "AR",
)

SD = drafting(
    "sd",
    "SD",
    "speculative decoding: a draft model proposes a chain of gamma tokens from its views",
)

SPD = drafting(
    "spd",
    "SPD",
    "SPD (Gagrani et al. 2024; DREAM's Table 1 baseline): a small language model drafts "
    "from the text alone (view T), a chain of gamma tokens",
    views="T",
)

SD_CHAIN = drafting(
    "sd_chain",
    "SD-chain",
    "speculative decoding with a chain of gamma draft tokens (the tree papers' baseline)",
)

SD_TREE = drafting(
    "sd_tree",
    "SD-Tree",
    "speculative decoding with a static draft tree (EAGLE's 25-node tree, as in SAGE "
    "and SpecVLM), verified in one tree-masked target forward",
    tree="static",
    paths=EAGLE_TREE,
)

EAGLE2_TREE = drafting(
    "eagle2_tree",
    "EAGLE-2 tree",
    "a small draft model growing EAGLE-2 dynamic trees (the root's top_k, then depth "
    "rounds expanding the top_k nodes of each level; total_tokens - 1 drafted nodes "
    "kept by cumulative log-probability, the root counted as in EAGLE-2's release), one "
    "tree-masked verification",
    tree="dynamic",
)
