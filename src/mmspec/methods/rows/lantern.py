"""LANTERN (image generation) over a draft model's chain and EAGLE-2 trees, over EAGLE's head (the
paper's drafter: EAGLE-2 on LlamaGen), and the paper's ablations of the neighbourhood (Table 4:
cosine and random proximity; JSD for TVD).

The defaults are the release's (the rule's declaration, decoding.acceptance.lantern.Lantern): k
1000 of LlamaGen's 16384 codes, so a smaller codebook sets lantern_k below its size. Over trees
the rule follows jadohu/LANTERN's models/ea_model_llamagen.py `evaluate_posterior`: greedy takes
the longest accepted path over every root-to-leaf path (:893-903; ties: the first leaf in
proposal order); after a rejected candidate under sampling mmspec zeroes its relaxed set A
(lossless at delta 0), and `lantern_sibling_mask: release` zeroes instead x and its k + 1 nearest
codes as the release does (:769-773).
"""

from __future__ import annotations

from mmspec.methods.rows.row import Method, drafting

LANTERN = dict(acceptance="lantern")

ROWS = [
    drafting(
        "lantern",
        "LANTERN",
        "LANTERN's relaxed acceptance: a drafted image code also counts the target's mass on "
        "its nearest codes in the VQ latent space, within total variation delta; a chain of "
        "gamma codes from a draft model",
        **LANTERN,
    ),
    drafting(
        "lantern_tree",
        "LANTERN (EAGLE-2 tree)",
        "LANTERN's relaxed acceptance over EAGLE-2 dynamic trees of a draft model (the "
        "paper's drafter shape); greedy accepts the longest passing path, as the release",
        tree="dynamic",
        **LANTERN,
    ),
    Method(
        "lantern_eagle2",
        "LANTERN's relaxed acceptance over EAGLE-2: EAGLE's head trained on the image "
        "target's own features, guided as the target, growing dynamic trees (the paper's "
        "drafter, Section 4.1)",
        {"drafter": "eagle", "tree": "dynamic", **LANTERN},
        "LANTERN (EAGLE-2 head)",
    ),
    Method(
        "lantern_eagle",
        "LANTERN's relaxed acceptance over a chain of gamma codes from EAGLE's head",
        {"drafter": "eagle", "tree": "chain", **LANTERN},
        "LANTERN (EAGLE head)",
    ),
    *[
        drafting(
            f"lantern_{name}",
            f"LANTERN ({what})",
            f"LANTERN's ablation with {what}",
            **{**LANTERN, key: value},
        )
        for name, what, key, value in [
            ("cosine", "cosine proximity", "proximity", "cosine"),
            ("random", "random neighbours", "proximity", "random"),
            ("jsd", "JSD bound", "divergence", "jsd"),
        ]
    ],
]
