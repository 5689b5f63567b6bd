"""Methods as data: a method is a named composition drafter x view x tree policy x acceptance rule.

A cell's method spec is the registry entry's defaults overridden by the config's hyperparameters,
so a new combination is a new entry (or a config override), never new decoding code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmspec.methods.components import (
    ACCEPTANCE,
    ACCEPTANCE_DEFAULTS,
    DIVERGENCES,
    DRAFTING,
    DREAM_DEFAULTS,
    DREAM_INTERMEDIATE,
    EAGLE_TREE,
    FLY_DEFAULTS,
    HEAD_DRAFTERS,
    HEAD_DRAFTING,
    KANGAROO_DEFAULTS,
    LANTERN_DEFAULTS,
    LVSPEC_DEFAULTS,
    MULTI_HEAD_TRAINING,
    PROXIMITIES,
    RANDOM_RELAX_DEFAULTS,
    SAGE_DEFAULTS,
    TREES,
    VIEW_NAMES,
    WEIGHT_POLICIES,
    read_keys,
    readers,
)


@dataclass(frozen=True)
class Method:
    """A registry entry: its components, the default of every hyperparameter, a display label."""

    name: str
    description: str
    defaults: dict = field(default_factory=dict)
    label: str = ""


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
            "views M, T, C, P, weights softmax(log(1 / summed KL) / tau) per block (tau 1: "
            "proportional to 1 / KL, as TABED's release computes it)",
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


def _lantern_rows() -> list[Method]:
    """LANTERN (image generation) over a draft model's chain and EAGLE-2 trees, over EAGLE's
    head (the paper's drafter: EAGLE-2 on LlamaGen), and the paper's
    ablations of the neighbourhood (Table 4: cosine and random proximity; JSD for TVD). The
    defaults are the release's (components.LANTERN_DEFAULTS): k 1000 of LlamaGen's 16384 codes,
    so a smaller codebook sets lantern_k below its size."""
    lantern = dict(acceptance="lantern", **LANTERN_DEFAULTS)
    return [
        _drafting(
            "lantern",
            "LANTERN",
            "LANTERN's relaxed acceptance: a drafted image code also counts the target's mass on "
            "its nearest codes in the VQ latent space, within total variation delta; a chain of "
            "gamma codes from a draft model",
            **lantern,
        ),
        _drafting(
            "lantern_tree",
            "LANTERN (EAGLE-2 tree)",
            "LANTERN's relaxed acceptance over EAGLE-2 dynamic trees of a draft model (the "
            "paper's drafter shape)",
            tree="dynamic",
            **lantern,
        ),
        Method(
            "lantern_eagle2",
            "LANTERN's relaxed acceptance over EAGLE-2: EAGLE's head trained on the image "
            "target's own features, guided as the target, growing dynamic trees (the paper's "
            "drafter, Section 4.1)",
            {**HEAD_DRAFTING, "drafter": "eagle", "tree": "dynamic", **lantern},
            "LANTERN (EAGLE-2 head)",
        ),
        Method(
            "lantern_eagle",
            "LANTERN's relaxed acceptance over a chain of gamma codes from EAGLE's head",
            {**HEAD_DRAFTING, "drafter": "eagle", "tree": "chain", **lantern},
            "LANTERN (EAGLE head)",
        ),
        *[
            _drafting(
                f"lantern_{name}",
                f"LANTERN ({what})",
                f"LANTERN's ablation with {what}",
                **{**lantern, key: value},
            )
            for name, what, key, value in [
                ("cosine", "cosine proximity", "proximity", "cosine"),
                ("random", "random neighbours", "proximity", "random"),
                ("jsd", "JSD bound", "divergence", "jsd"),
            ]
        ],
    ]


def _loose_rows() -> list[Method]:
    """LVSpec and the loose baselines it compares with (its Table 1 and Figure 7), all on a chain
    of K = 10 draft tokens (Section 4: "the same number of draft tokens (K = 10), forming a
    chain-like structure") from a draft that reads 10% of the visual tokens (Std.-SD: the draft
    with uniform video token pruning, as SpecVLM's)."""
    chain = dict(gamma=10, views="U", keep=0.1)
    return [
        _drafting(
            "lvspec",
            "LVSpec",
            "LVSpec's loose verification: the lambda*K drafted tokens least relevant to the "
            "visual tokens (mean top-N cosine of the target's last-layer states) may mismatch; "
            "position-shift tolerance on",
            acceptance="lvspec",
            **chain,
            **LVSPEC_DEFAULTS,
        ),
        _drafting(
            "lvspec_nopst",
            "LVSpec (w/o PST)",
            "LVSpec without position-shift tolerance (its lambda and N studies, Table 3)",
            acceptance="lvspec",
            **chain,
            **{**LVSPEC_DEFAULTS, "pst": False},
        ),
        _drafting(
            "fly",
            "FLY",
            "FLy: a mismatch is accepted when the target's top-3 entropy reaches the threshold "
            "and the next window - 1 drafted tokens match",
            acceptance="fly",
            **chain,
            **FLY_DEFAULTS,
        ),
        _drafting(
            "fly_gate",
            "FLY⊖",
            "FLy's entropy gate without its deferred window (LVSpec's FLY-minus)",
            acceptance="fly_gate",
            **chain,
            fly_entropy=FLY_DEFAULTS["fly_entropy"],
        ),
        _drafting(
            "random_relax",
            "Random relaxation",
            "each mismatch accepted with probability rho, blind to the visual content "
            "(LVSpec's Figure 7 control)",
            acceptance="random_relax",
            **chain,
            **RANDOM_RELAX_DEFAULTS,
        ),
    ]


def _head_rows() -> list[Method]:
    """Trained heads on the target's features (DREAM's Table 1 baselines), trained by stage
    train_drafter with `head_*` hyperparameters (components.HEAD_TRAINING)."""
    return [
        Method(
            "eagle",
            "EAGLE: a one-layer head extrapolating the target's last-layer features (input: "
            "the next token's embedding and the current feature), the target's lm_head; "
            "EAGLE's static tree (its release's mc_sim_7b_63)",
            {**HEAD_DRAFTING, "drafter": "eagle", "tree": "static", "paths": EAGLE_TREE},
            "EAGLE",
        ),
        Method(
            "eagle2",
            "EAGLE-2: the EAGLE head growing dynamic trees (release defaults: depth 5, top_k "
            "10, total_token 60), reranked by cumulative draft log-probability",
            {**HEAD_DRAFTING, "drafter": "eagle", "tree": "dynamic"},
            "EAGLE-2",
        ),
        Method(
            "medusa",
            "Medusa: K heads on the target's last feature, head k drafting the token k ahead "
            "independently of the others; Medusa's tree (mc_sim_7b_63)",
            {
                **HEAD_DRAFTING,
                "drafter": "medusa",
                "tree": "static",
                "paths": EAGLE_TREE,
                **MULTI_HEAD_TRAINING,
            },
            "Medusa",
        ),
        Method(
            "hydra",
            "Hydra: Medusa's heads made sequentially dependent (head k also reads the tokens "
            "drafted before it); Medusa's tree",
            {
                **HEAD_DRAFTING,
                "drafter": "hydra",
                "tree": "static",
                "paths": EAGLE_TREE,
                **MULTI_HEAD_TRAINING,
            },
            "Hydra",
        ),
        Method(
            "kangaroo",
            "Kangaroo: self-speculative drafting with the target's first layers and a trained "
            "adapter; a chain of at most 6 tokens that stops below a top-1 probability of 0.6",
            {
                **HEAD_DRAFTING,
                "drafter": "kangaroo",
                "tree": "chain",
                "gamma": 6,
                **KANGAROO_DEFAULTS,
            },
            "Kangaroo",
        ),
        *_dream_rows(),
    ]


def _dream_rows() -> list[Method]:
    """DREAM (its tree: k 4, depth 6, 32 tokens) and its ablations (Sections 4.3-4.4)."""
    dream = {
        **HEAD_DRAFTING,
        "drafter": "dream",
        "tree": "dynamic",
        "depth": 6,
        "top_k": 4,
        "total_tokens": 32,
        **DREAM_DEFAULTS,
    }
    return [
        Method(
            "dream",
            "DREAM: EAGLE's entries through a decoder block, gated cross-attention over the "
            "target's verified features (75% of the visual tokens kept), a decoder block; "
            "trained with the intermediate feature of the lowest-entropy layer per token",
            dream,
            "DREAM",
        ),
        Method(
            "dream_nocross",
            "DREAM without its cross-attention block (Table 2's w/o CA)",
            {**dream, "dream_cross": False},
            "DREAM w/o CA",
        ),
        Method(
            "dream_fixed",
            "DREAM with the intermediate feature of a fixed layer, half the target's depth "
            "(Figure 4a's Static-50%)",
            {**dream, "dream_intermediate": "fixed"},
            "DREAM (S-50%)",
        ),
        Method(
            "dream_nointer",
            "DREAM without intermediate feature distillation (Figure 4a's No Mid)",
            {**dream, "dream_intermediate": "none"},
            "DREAM (no mid)",
        ),
    ]


METHODS = {
    m.name: m
    for m in [
        Method(
            "ar",
            "autoregressive decoding with the target alone (the baseline of every speedup)",
            {"drafter": "none"},
            "AR",
        ),
        _drafting(
            "sd",
            "SD",
            "speculative decoding: a draft model proposes a chain of gamma tokens from its views",
        ),
        *_tabed_rows(),
        _drafting(
            "spd",
            "SPD",
            "SPD (Gagrani et al. 2024; DREAM's Table 1 baseline): a small language model drafts "
            "from the text alone (view T), a chain of gamma tokens",
            views="T",
        ),
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
            "tracking of accepted lengths; EAGLE's 25-node tree on the first step) drafted from "
            "SpecVLM's pruned view S",
            views="S",
            tree="sage",
            **SAGE_DEFAULTS,
        ),
        _drafting(
            "eagle2_tree",
            "EAGLE-2 tree",
            "a small draft model growing EAGLE-2 dynamic trees (the root's top_k, then depth "
            "rounds expanding the top_k nodes of each level; total_tokens - 1 drafted nodes "
            "kept by cumulative log-probability, the root counted as in EAGLE-2's release), one "
            "tree-masked verification",
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
        *_lantern_rows(),
        *_loose_rows(),
        *_head_rows(),
    ]
}

# Allowed values of hyperparameters whose domain is a fixed set; others are checked by type.
# (`drafter` is fixed by the method: AR has none, every drafting method a drafter.)
CHOICES = {
    "drafter": ("model",),
    "tree": TREES,
    "acceptance": tuple(ACCEPTANCE),
    "weights": WEIGHT_POLICIES,
    "proximity": PROXIMITIES,
    "dream_intermediate": DREAM_INTERMEDIATE,
    "divergence": DIVERGENCES,
}
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
    "lantern_k": int,
    "lantern_delta": (int, float),
    "lvspec_lambda": (int, float),
    "lvspec_n": int,
    "pst": bool,
    "pst_range": int,
    "pst_ahead": bool,
    "fly_entropy": (int, float),
    "fly_window": int,
    "relax_rho": (int, float),
    "head_data": str,
    "head_steps": int,
    "head_lr": (int, float),
    "head_batch_size": int,
    "head_noise": (int, float),
    "head_layers": int,
    "dream_cross": bool,
    "dream_intermediate": str,
    "dream_vtc": (int, float),
    "medusa_heads": int,
    "kangaroo_layers": int,
    "kangaroo_exit": (int, float),
}
# Keys every method accepts on top of its defaults.
COMMON_KEYS = {"temperature"}
# Every hyperparameter some component reads: a method takes any of them, and refuses one its
# components do not read as configured (`unread_key_error`).
KNOWN_KEYS = frozenset(TYPES) | frozenset(CHOICES) | {"paths"} | COMMON_KEYS


def resolve(method_name: str, hparams: dict, temperature: float = 0.0, strict: bool = True) -> dict:
    """The spec of `method_name` with `hparams` applied (`temperature` unless they set one),
    holding only the keys its components read (`components.read_keys`); raises ValueError naming
    the key on unknown keys, values or combinations. A key of `hparams` that no component of the
    result reads is an error, unless not `strict` (one point of a grid, where another point may
    read it: config checks the grid as a whole)."""
    if method_name not in METHODS:
        raise ValueError(f"unknown method {method_name!r}; known: {sorted(METHODS)}")
    spec = dict(METHODS[method_name].defaults)
    # the chosen acceptance rule's own hyperparameters join the method's
    for key, value in ACCEPTANCE_DEFAULTS.get(
        hparams.get("acceptance", spec.get("acceptance")), {}
    ).items():
        spec.setdefault(key, value)
    for key, value in hparams.items():
        if key not in spec and key not in KNOWN_KEYS:
            raise ValueError(
                f"method {method_name!r} has no hyperparameter {key!r}; its own: "
                f"{sorted(set(spec) | COMMON_KEYS)}, any component's: {sorted(KNOWN_KEYS)}"
            )
        if key == "drafter" and value != spec.get("drafter"):
            raise ValueError(
                f"drafter={value!r} is not one of {list(CHOICES[key])} for method "
                f"{method_name!r}: the drafter is fixed by the method (ar: 'none', every "
                "drafting method: 'model'); to decode autoregressively use `method: ar`, which "
                "has no views or gamma"
            )
        if key in CHOICES and value not in CHOICES[key] and key != "drafter":
            raise ValueError(f"{key}={value!r} is not one of {list(CHOICES[key])}")
        if key in TYPES and (
            isinstance(value, bool) != (TYPES[key] is bool) or not isinstance(value, TYPES[key])
        ):
            raise ValueError(f"{key}={value!r} should be of type {TYPES[key]}")
        spec[key] = value
    spec.setdefault("temperature", temperature)
    spec["method"] = method_name
    if spec.get("tree") == "sage":  # SAGE's tree on a method whose defaults lack it
        for key, value in SAGE_DEFAULTS.items():
            spec.setdefault(key, value)
    read = read_keys(spec)
    unread = [key for key in hparams if key not in read]
    if strict and unread:
        raise ValueError(unread_key_error(unread[0], method_name, spec))
    # a `lantern_eagle` verifying with `sampling` is exact, and its cell carries no delta; a
    # single view has no ensemble weights: keys no component reads are not part of the cell
    spec = {key: value for key, value in spec.items() if key in read}
    _check_ranges(spec)
    _check_combination(spec)
    return spec


def unread_key_error(key: str, method_name: str, spec: dict) -> str:
    """Why `key` is refused on a method whose components do not read it."""
    if spec["drafter"] == "none":
        parts = "decodes autoregressively (no drafter)"
    elif spec["drafter"] in HEAD_DRAFTERS:
        parts = (
            f"drafts with a trained {spec['drafter']} head, tree {spec['tree']!r}, acceptance "
            f"{spec['acceptance']!r}"
        )
    else:
        parts = (
            f"drafts from views {spec['views']!r}, tree {spec['tree']!r}, acceptance "
            f"{spec['acceptance']!r}"
        )
        if len(spec["views"]) > 1:
            parts += f", weights {spec.get('weights')!r}"
    return f"{key} is read only by {readers(key)}, and method {method_name!r} here {parts}"


def _check_ranges(spec: dict) -> None:
    if spec["temperature"] < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {spec['temperature']}")
    positive = (
        "gamma",
        "depth",
        "top_k",
        "head_steps",
        "head_batch_size",
        "head_layers",
        "medusa_heads",
        "kangaroo_layers",
        *[k for k in SAGE_DEFAULTS if k != "sage_low"],
    )
    for key in positive:
        if spec.get(key) is not None and spec[key] < 1:
            raise ValueError(f"{key} must be >= 1, got {spec[key]}")
    if spec.get("lantern_k") is not None and spec["lantern_k"] < 0:
        raise ValueError(
            f"lantern_k must be >= 0 (0: no neighbours, lossless), got {spec['lantern_k']}"
        )
    if spec.get("lantern_delta") is not None and not 0 <= spec["lantern_delta"] <= 1:
        raise ValueError(
            f"lantern_delta bounds a divergence (TVD, or JSD in bits) and must be in [0, 1], "
            f"got {spec['lantern_delta']}"
        )
    for key, what in [
        ("lvspec_lambda", "the share of drafted tokens that may mismatch"),
        ("relax_rho", "the probability of accepting a mismatch"),
    ]:
        if spec.get(key) is not None and not 0 <= spec[key] <= 1:
            raise ValueError(f"{key} is {what} and must be in [0, 1], got {spec[key]}")
    for key, what in [
        ("lvspec_n", "the number of most similar visual tokens averaged"),
        ("fly_window", "FLy's deferred window, counting the mismatch itself"),
        ("pst_range", "PST's tolerable shift in positions (unset: the whole step, K)"),
    ]:
        if spec.get(key) is not None and spec[key] < 1:
            raise ValueError(f"{key} is {what} and must be >= 1, got {spec[key]}")
    if spec.get("kangaroo_exit") is not None and not 0 <= spec["kangaroo_exit"] <= 1:
        raise ValueError(
            f"kangaroo_exit is a probability and must be in [0, 1], got {spec['kangaroo_exit']}"
        )
    if spec.get("dream_vtc") is not None and not 0 < spec["dream_vtc"] <= 1:
        raise ValueError(
            f"dream_vtc is the share of visual tokens kept and must be in (0, 1], "
            f"got {spec['dream_vtc']}"
        )
    if spec.get("head_lr") is not None and spec["head_lr"] <= 0:
        raise ValueError(f"head_lr must be > 0, got {spec['head_lr']}")
    if spec.get("head_noise") is not None and spec["head_noise"] < 0:
        raise ValueError(f"head_noise is a noise width and must be >= 0, got {spec['head_noise']}")
    if spec.get("fly_entropy") is not None and spec["fly_entropy"] < 0:
        raise ValueError(
            f"fly_entropy is an entropy (nats) and must be >= 0, got {spec['fly_entropy']}"
        )
    if spec.get("total_tokens") is not None and spec["total_tokens"] < 2:
        raise ValueError(
            f"total_tokens counts the root too (EAGLE-2's release) and must be >= 2, "
            f"got {spec['total_tokens']}"
        )
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
    views = spec.get("views")
    if views is not None and (
        not views or set(views) - set(VIEW_NAMES) or len(set(views)) != len(views)
    ):
        raise ValueError(
            f"views={views!r}: one or more distinct letters of {VIEW_NAMES} "
            "(M full, T text only, C caption, P pooled, U uniform pruning, "
            "S SpecVLM attention pruning)"
        )


def _check_combination(spec: dict) -> None:
    """Combinations that cannot run, or would silently not do what they say."""
    if spec["drafter"] == "none":
        return
    tree = spec["tree"]
    if tree == "static":
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
        known = {tuple(p) for p in paths}
        for p in paths:
            if len(p) > 1 and tuple(p[:-1]) not in known:
                raise ValueError(f"paths: {p} lacks its prefix {p[:-1]}")
        if len(known) != len(paths):
            raise ValueError("paths: a path is listed twice")
    heads = spec.get("medusa_heads") if spec["drafter"] in ("medusa", "hydra") else None
    if heads is not None and tree_depth(spec) is not None and tree_depth(spec) > heads:
        raise ValueError(
            f"a {spec['drafter']} head drafts at most medusa_heads={heads} tokens deep, and tree "
            f"{tree!r} drafts {tree_depth(spec)}"
        )
    if spec["acceptance"] == "greedy" and spec["temperature"] > 0:
        raise ValueError(
            f"acceptance 'greedy' with temperature {spec['temperature']}: greedy acceptance "
            "decodes the target's argmax; to sample at temperature > 0 use acceptance 'sampling'"
        )


def tree_depth(spec: dict) -> int | None:
    """How deep a spec's proposals can be (None: the policy decides as it drafts)."""
    tree = spec["tree"]
    if tree == "chain":
        return spec["gamma"]
    if tree == "static":
        return max(len(p) for p in spec["paths"])
    if tree == "dynamic":
        return spec["depth"] + 1
    return spec.get("sage_d_max")


def label(entry: str, method: str) -> str:
    """Display name of a config entry: the paper's row name when it is a registry method."""
    registered = METHODS.get(entry)
    if registered is not None and registered.label and entry == method:
        return registered.label
    return entry
