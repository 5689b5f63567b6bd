"""Methods as data: a method is a named composition drafter x view x tree policy x acceptance rule.

A cell's method spec is the registry entry's defaults overridden by the config's hyperparameters,
so a new combination is a new entry (or a config override), never new decoding code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The component choices a spec may name, and the hyperparameters each component reads. (Kept
# free of torch imports so that config validation stays fast; tests check these names against
# decoding.views.VIEWS and decoding.weights.POLICIES.)
VIEW_NAMES = "MTCPUS"
IMAGE_VIEWS = frozenset("MPUS")  # views that read the draft model's visual cache
POLICIES = ("static", "random", "kld", "tvd", "grid", "softmax", "adaboost")
DRAFTERS = ("none", "model")
TREES = ("none", "chain", "static", "dynamic", "sage")
ACCEPTANCE = ("none", "greedy", "sampling")
LOSSLESS_ACCEPTANCE = ("none", "greedy", "sampling")


@dataclass(frozen=True)
class Method:
    """A registry entry: its components, the default of every hyperparameter, a display label."""

    name: str
    description: str
    defaults: dict = field(default_factory=dict)
    label: str = ""


# What every model drafter accepts: views (letters, see decoding.views), the ensemble weight
# policy and its window h (0 = the whole history), U's keep ratio, the policies' constants.
DRAFTING = {
    "drafter": "model",
    "views": "M",
    "keep": 0.5,
    # view S (SpecVLM): share of visual tokens dropped, and the share of the target's
    # text-to-visual attention mass that the kept tokens should cover before uniform filling
    "drop": 0.9,
    "mass": 0.4,
    "weights": "static",
    "window": 0,
    "softmax_temperature": 1.0,
    "adaboost_constant": 1.0,
    "tree": "chain",
    "gamma": 5,
    "paths": None,  # tree "static": the tree as paths of child ranks, e.g. [[0], [1], [0, 0]]
    # tree "dynamic" (EAGLE-2; defaults from its release): levels, children per expanded node,
    # nodes kept after reranking by cumulative draft log-probability
    "depth": 5,
    "top_k": 10,
    "total_tokens": 60,
    "acceptance": "greedy",
}


# SAGE's tree hyperparameters (its section 5): Dmin, Dmax, Wmin, Wmax, top-k of the confidence,
# N_max, history window and its lower/upper thresholds.
SAGE_DEFAULTS = {
    "sage_d_min": 3,
    "sage_d_max": 8,
    "sage_w_min": 2,
    "sage_w_max": 10,
    "sage_k": 10,
    "sage_n_max": 64,
    "sage_window": 10,
    "sage_low": 2.0,
    "sage_high": 3.0,
}


# EAGLE's 25-node tree (`mc_sim_7b_63` in its choices.py), which SpecVLM's release uses for its
# static trees and SAGE for SD-Tree, SpecVLM and its own first step (SAGE appendix A.1).
EAGLE_TREE = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip


def spine_tree(width: int, depth: int) -> list[list[int]]:
    """Paths of a tree with `width` candidates at each of `depth` positions, all hanging off the
    best path: [[0], [1], [0, 0], [0, 1], ...] (width * depth nodes)."""
    return [[0] * level + [rank] for level in range(depth) for rank in range(width)]


def _drafting(name: str, label: str, description: str, **overrides) -> Method:
    return Method(name, description, {**DRAFTING, **overrides}, label)


def _tabed_rows() -> list[Method]:
    """TABED's table rows: single views, static ensembles, and the adaptive ensembles."""
    rows = [
        _drafting(v.lower(), v, f"TABED single-view drafting: view {v} ({what})", views=v)
        for v, what in [
            ("M", "full visual tokens"),
            ("T", "text only"),
            ("C", "captions in place of images"),
            ("P", "2x2-pooled visual tokens"),
        ]
    ]
    rows += [
        _drafting(
            v.lower(),
            "MT = Static^MT" if v == "MT" else v,
            f"batched ensemble of views {', '.join(v)} with equal (static) weights",
            views=v,
        )
        for v in ("MT", "MTC", "MTP", "MTCP")
    ]
    rows += [
        _drafting(
            "random_mt",
            "Random^MT",
            "views M and T, random non-negative weights summing to one per block",
            views="MT",
            weights="random",
        ),
        _drafting(
            "tabed_mt",
            "TABED^MT",
            "views M and T, weights on a 0.1 grid chosen per block by argmax matches "
            "with the target over the history (ties: lowest KL)",
            views="MT",
            weights="grid",
        ),
        _drafting(
            "tabed_mtcp",
            "TABED^MTCP",
            "views M, T, C, P, weights softmax(1 / summed KL) at temperature 1 per block",
            views="MTCP",
            weights="softmax",
        ),
        _drafting(
            "tabed_adaboost",
            "TABED^MT-AdaBoost",
            "views M and T, weights ln(1/error - 1) + C ln(K - 1) from each view's error rate",
            views="MT",
            weights="adaboost",
        ),
    ]
    return rows


METHODS = {
    m.name: m
    for m in [
        Method(
            "ar",
            "autoregressive decoding with the target alone (the baseline of every speedup)",
            {"drafter": "none", "tree": "none", "acceptance": "none"},
            "AR",
        ),
        _drafting(
            "sd",
            "SD",
            "speculative decoding: a draft model proposes a chain of gamma tokens from its views",
        ),
        *_tabed_rows(),
        _drafting(
            "sd_chain",
            "SD-chain",
            "speculative decoding with a chain of gamma draft tokens (the tree papers' baseline)",
        ),
        _drafting(
            "sd_tree",
            "SD-Tree",
            "speculative decoding with a static draft tree (EAGLE's 25-node tree, as in SAGE "
            "and SpecVLM), verified in one tree-masked target forward",
            tree="static",
            paths=EAGLE_TREE,
        ),
        _drafting(
            "specvlm",
            "SpecVLM",
            "SpecVLM: the draft reads only the visual tokens kept by the target's "
            "text-to-visual attention (view S: top tokens up to `mass` of the attention, the "
            "rest of the budget (1 - drop) uniform) and drafts EAGLE's 25-node static tree",
            views="S",
            tree="static",
            paths=EAGLE_TREE,
        ),
        _drafting(
            "sage",
            "SAGE",
            "SAGE: entropy-adaptive trees (depth and width from the draft's confidence, history "
            "tracking of accepted lengths) drafted from SpecVLM's pruned view S",
            views="S",
            tree="sage",
            **SAGE_DEFAULTS,
        ),
        _drafting(
            "eagle2_tree",
            "EAGLE-2 tree",
            "a small draft model growing EAGLE-2 dynamic trees (top_k per level, depth levels, "
            "total_tokens kept by cumulative log-probability), one tree-masked verification",
            tree="dynamic",
        ),
        _drafting(
            "tabed_tree",
            "TABED^MT tree (d=2)",
            "TABED^MT drafting a token tree of width d along the best path (the top-d tokens at "
            "each of gamma positions; TABED's Table 2), weights from the verified history",
            views="MT",
            weights="grid",
            tree="static",
            paths=spine_tree(2, 5),
        ),
        _drafting(
            "sage_tree",
            "SAGE trees (M)",
            "SAGE's entropy-adaptive trees drafted from the full view M (an ablation of `sage`, "
            "which drafts from SpecVLM's pruned view S)",
            tree="sage",
            **SAGE_DEFAULTS,
        ),
    ]
}

# Allowed values of hyperparameters whose domain is a fixed set; others are checked by type.
CHOICES = {"drafter": DRAFTERS, "tree": TREES, "acceptance": ACCEPTANCE, "weights": POLICIES}
TYPES = {
    **{k: (int, float) if isinstance(v, float) else int for k, v in SAGE_DEFAULTS.items()},
    "gamma": int,
    "depth": int,
    "top_k": int,
    "total_tokens": int,
    "window": int,
    "views": str,
    "temperature": (int, float),
    "keep": (int, float),
    "drop": (int, float),
    "mass": (int, float),
    "softmax_temperature": (int, float),
    "adaboost_constant": (int, float),
}
# Keys every method accepts on top of its defaults.
COMMON_KEYS = {"temperature"}


def resolve(method_name: str, hparams: dict) -> dict:
    """The full spec of `method_name` with `hparams` applied; raises ValueError on unknown keys."""
    if method_name not in METHODS:
        raise ValueError(f"unknown method {method_name!r}; known: {sorted(METHODS)}")
    spec = dict(METHODS[method_name].defaults)
    for key, value in hparams.items():
        if key not in spec and key not in COMMON_KEYS:
            allowed = sorted(set(spec) | COMMON_KEYS)
            raise ValueError(
                f"method {method_name!r} has no hyperparameter {key!r}; allowed: {allowed}"
            )
        if key in CHOICES and value not in CHOICES[key]:
            raise ValueError(f"{key}={value!r} is not one of {list(CHOICES[key])}")
        if key in TYPES and (isinstance(value, bool) or not isinstance(value, TYPES[key])):
            raise ValueError(f"{key}={value!r} should be of type {TYPES[key]}")
        spec[key] = value
    if spec.get("gamma") is not None and spec["gamma"] < 1:
        raise ValueError(f"gamma must be >= 1, got {spec['gamma']}")
    for key in ("depth", "top_k", "total_tokens", *[k for k in SAGE_DEFAULTS if k != "sage_low"]):
        if spec.get(key) is not None and spec[key] < 1:
            raise ValueError(f"{key} must be >= 1, got {spec[key]}")
    if spec.get("window") is not None and spec["window"] < 0:
        raise ValueError(f"window must be >= 0 (0 = the whole history), got {spec['window']}")
    if spec.get("keep") is not None and not 0 < spec["keep"] <= 1:
        raise ValueError(f"keep must be in (0, 1], got {spec['keep']}")
    if spec.get("drop") is not None and not 0 <= spec["drop"] < 1:
        raise ValueError(f"drop must be in [0, 1), got {spec['drop']}")
    if spec.get("mass") is not None and not 0 <= spec["mass"] <= 1:
        raise ValueError(f"mass must be in [0, 1], got {spec['mass']}")
    if spec.get("softmax_temperature") is not None and spec["softmax_temperature"] <= 0:
        raise ValueError(f"softmax_temperature must be > 0, got {spec['softmax_temperature']}")
    if spec.get("tree") == "static":
        paths = spec.get("paths")
        if not (
            isinstance(paths, list)
            and paths
            and all(
                isinstance(p, list)
                and p
                and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in p)
                for p in paths
            )
        ):
            raise ValueError(
                "tree 'static' needs `paths`: a list of paths of child ranks, "
                "e.g. [[0], [1], [0, 0]]"
            )
    views = spec.get("views")
    if views is not None and (
        not views or set(views) - set(VIEW_NAMES) or len(set(views)) != len(views)
    ):
        raise ValueError(
            f"views={views!r}: one or more distinct letters of {VIEW_NAMES} "
            "(M full, T text only, C caption, P pooled, U uniform pruning, "
            "S SpecVLM attention pruning)"
        )
    return spec


def label(entry: str, method: str) -> str:
    """Display name of a config entry: the paper's row name when it is a registry method."""
    registered = METHODS.get(entry)
    if registered is not None and registered.label and entry == method:
        return registered.label
    return entry


def is_lossless(spec: dict) -> bool:
    """Whether the spec's acceptance rule preserves the target's output distribution."""
    return spec.get("acceptance", "none") in LOSSLESS_ACCEPTANCE
