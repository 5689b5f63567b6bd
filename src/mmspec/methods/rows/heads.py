"""Trained heads on the target's features (DREAM's Table 1 baselines): EAGLE, EAGLE-2, Medusa,
Hydra and Kangaroo, trained by stage train_drafter with `head_*` hyperparameters
(decoding.drafters.trained.HEAD_TRAINING). DREAM's own rows are `rows.dream`."""

from __future__ import annotations

from mmspec.decoding.drafters.medusa import MEDUSA_TREE
from mmspec.decoding.trees import EAGLE_TREE
from mmspec.methods.rows.row import HEAD, Method

ROWS = [
    Method(
        "eagle",
        "EAGLE: a one-layer head extrapolating the target's last-layer features (input: "
        "the next token's embedding and the current feature), the target's lm_head; "
        "EAGLE's static tree (its release's mc_sim_7b_63)",
        {**HEAD, "drafter": "eagle", "tree": "static", "paths": EAGLE_TREE},
        "EAGLE",
    ),
    Method(
        "eagle2",
        "EAGLE-2: the EAGLE head growing dynamic trees (depth 5, top_k 10, total_token 60: "
        "the release's evaluation scripts, eagle/evaluation/gen_ea_answer_*.py at bfeb532), "
        "reranked by cumulative draft log-probability at temperature 1 as its topK_genrate "
        "does at any sampling temperature",
        {**HEAD, "drafter": "eagle", "tree": "dynamic"},
        "EAGLE-2",
    ),
    Method(
        "medusa",
        "Medusa: K heads on the target's last feature, head k drafting the token k + 2 "
        "ahead independently of the others, read out by the target's lm_head (release "
        "`medusa_model_legacy.py`); Medusa's 63-node tree (release `medusa_choices.py`, "
        "mc_sim_7b_63)",
        {**HEAD, "drafter": "medusa", "tree": "static", "paths": MEDUSA_TREE},
        "Medusa",
    ),
    Method(
        "hydra",
        "Hydra: Medusa's heads made sequentially dependent (head k also reads the "
        "embeddings of the target's token and of the tokens drafted before it; release "
        "`hydra_heads/mlp_head.py`, grounded `HydraMLP`); Medusa's 63-node tree, as "
        "Hydra's release evaluates",
        {**HEAD, "drafter": "hydra", "tree": "static", "paths": MEDUSA_TREE},
        "Hydra",
    ),
    Method(
        "kangaroo",
        "Kangaroo: self-speculative drafting with the target's first layers and a trained "
        "attention-only adapter (release `kangaroo/adapter.py`); a chain of at most 6 "
        "tokens that stops after the first one whose top-1 probability is below 0.6 "
        "(release `evaluation/inference_kangaroo.py`, `kangaroo_forward`)",
        {**HEAD, "drafter": "kangaroo", "tree": "chain", "gamma": 6},
        "Kangaroo",
    ),
]
