"""TABED's rows: single views, static ensembles, the adaptive ensembles (its table's rows), and
TABED^MT drafting a tree along the best path (its Table 2). The AdaBoost weights follow TABED's
release (candidate_generator_vlmsd.py, get_candidates: agg_ftn; pick_next_token)."""

from __future__ import annotations

from mmspec.methods.rows.row import Method, drafting


def spine_tree(width: int, depth: int) -> list[list[int]]:
    """Paths of a tree with `width` candidates at each of `depth` positions, all hanging off the
    best path: [[0], [1], [0, 0], [0, 1], ...] (width * depth nodes)."""
    return [[0] * level + [rank] for level in range(depth) for rank in range(width)]


SINGLE_VIEWS = [
    drafting(v.lower(), v, f"TABED single-view drafting: view {v} ({what})", views=v)
    for v, what in [
        ("M", "full visual tokens"),
        ("T", "text only"),
        ("C", "captions in place of images"),
        ("P", "2x2-pooled visual tokens"),
    ]
]

STATIC_ENSEMBLES = [
    drafting(
        v.lower(),
        "MT = Static^MT" if v == "MT" else v,
        f"batched ensemble of views {', '.join(v)} with equal (static) weights",
        views=v,
    )
    for v in ("MT", "MTC", "MTP", "MTCP")
]

ADAPTIVE_ENSEMBLES = [
    drafting(
        "random_mt",
        "Random^MT",
        "views M and T, random non-negative weights summing to one per block",
        views="MT",
        weights="random",
    ),
    drafting(
        "tabed_mt",
        "TABED^MT",
        "views M and T, weights on a 0.1 grid chosen per block by argmax matches "
        "with the target over the history (ties: lowest KL)",
        views="MT",
        weights="grid",
    ),
    drafting(
        "tabed_mtcp",
        "TABED^MTCP",
        "views M, T, C, P, weights softmax(log(1 / summed KL) / tau) per block (tau 1: "
        "proportional to 1 / KL, as TABED's release computes it)",
        views="MTCP",
        weights="softmax",
    ),
    drafting(
        "tabed_adaboost",
        "TABED^MT-AdaBoost",
        "views M and T, weights ln(1/error - 1) + C ln(K - 1) from each view's argmax error "
        "rate over every verified position, divided by their sum; +-1e5 at error rate 0 or "
        "1 and negative weights kept, as TABED's release computes them "
        "(candidate_generator_vlmsd.py, get_candidates: agg_ftn; pick_next_token); equal "
        "weights where they sum to 0 (the release divides by zero there)",
        views="MT",
        weights="adaboost",
    ),
]

# TABED's table rows, in its order
VIEW_ROWS: list[Method] = [*SINGLE_VIEWS, *STATIC_ENSEMBLES, *ADAPTIVE_ENSEMBLES]

TABED_TREE = drafting(
    "tabed_tree",
    "TABED^MT tree (d=2)",
    "TABED^MT drafting a token tree of width d along the best path (the top-d tokens at "
    "each of gamma positions; TABED's Table 2), weights from the verified history",
    views="MT",
    weights="grid",
    tree="static",
    paths=spine_tree(2, 5),
)
