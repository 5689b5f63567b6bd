"""The names and defaults of every component a method composes (torch-free, one place).

A method is a drafter x views x tree policy x acceptance rule. Config validation, the registry,
the engine and the report all read the names, defaults and properties below; tests check that
the engine implements exactly these names.
"""

from __future__ import annotations

# Views (what a drafter sees of the prompt), one letter each; see decoding.views.
VIEW_NAMES = "MTCPUS"
IMAGE_VIEWS = frozenset("MPUS")  # views that read the draft model's visual cache
TARGET_GUIDED_VIEWS = frozenset("S")  # views built from the target's prefill

# Ensemble weight policies (TABED); see decoding.weights.
WEIGHT_POLICIES = ("static", "random", "kld", "tvd", "grid", "softmax", "adaboost")

# Drafters that need a draft model in the pair (`model`: a draft model over one or more views;
# trained heads on the target's features will not; AR's drafter is `none`).
DRAFTERS_WITH_MODEL = frozenset({"model"})
# Drafters that are heads trained on the target's own features (stage train_drafter; the pair
# needs no draft model): EAGLE (decoding.drafters.eagle), DREAM (decoding.drafters.dream).
HEAD_DRAFTERS = frozenset({"eagle", "dream", "medusa", "hydra", "kangaroo"})
# Of those, the heads that also draft image codes under guidance (LANTERN drafts with EAGLE-2's)
IMAGE_HEAD_DRAFTERS = ("eagle",)
# How a head is trained (method hyperparameters, so that a changed one retrains that head
# only). Defaults from EAGLE's release (`train/main.py`, its train_config: lr 3e-5, batch 4,
# AdamW betas (0.9, 0.95), gradient clip 0.5, uniform feature noise of width 0.2); `head_data`
# names the dataset (a training split) whose prompts the target answers, and has no default;
# `head_steps` counts optimiser steps (the release counts 20 epochs of ShareGPT instead).
HEAD_TRAINING = {
    "head_data": None,
    "head_steps": 2000,
    "head_lr": 3e-5,
    "head_batch_size": 4,
    "head_noise": 0.2,
    "head_layers": 1,
}
# DREAM (its Section 4.1 and the notes on its release): the cross-attention block on, the
# intermediate feature of the layer with the lowest attention entropy per token ("entropy";
# "fixed": the layer at half the target's depth, the paper's Static-50%; "none": no
# intermediate loss), 75% of the visual tokens kept in the cross-attention memory (VTC, applied
# when drafting); its tree: k 4, depth 6, 32 tokens (Section 4.1).
DREAM_TRAINING = {"dream_cross": True, "dream_intermediate": "entropy"}
DREAM_DEFAULTS = {**DREAM_TRAINING, "dream_vtc": 0.75}
DREAM_INTERMEDIATE = ("entropy", "fixed", "none")
# Medusa and Hydra: 5 heads (Medusa's vicuna-7b release; enough for the 5 levels of its tree,
# `mc_sim_7b_63` = EAGLE_TREE). Kangaroo (its release for 7B models): the target's first 2
# layers and an adapter; drafting stops below a top-1 probability of 0.6 or after 6 tokens.
MULTI_HEAD_TRAINING = {"medusa_heads": 5}
KANGAROO_TRAINING = {"kangaroo_layers": 2}
KANGAROO_DEFAULTS = {**KANGAROO_TRAINING, "kangaroo_exit": 0.6}
# Every hyperparameter a head is trained with (what its folder is keyed by).
HEAD_TRAINING_KEYS = (*HEAD_TRAINING, *DREAM_TRAINING, *MULTI_HEAD_TRAINING, *KANGAROO_TRAINING)
# Self-SD (LVSpec's and SpecVLM's setting): a pair's `draft: self` drafts with the target itself
# (config resolves it to the target's reference; the job loads the weights once).
SELF_DRAFT = "self"


def is_self_draft(pair: dict) -> bool:
    """Whether a (resolved) pair drafts with its own target."""
    return pair.get("draft") == pair["target"]


# Tree policies: the shape of each proposal; see decoding.trees.
TREES = ("chain", "static", "dynamic", "sage")

# Acceptance rules, and whether each preserves the target's output distribution. Lossless rules
# are checked token for token against AR (greedy) and by `mmspec verify-lossless` (sampling);
# lossy rules report retention and divergence instead.
ACCEPTANCE = {
    "greedy": True,
    "sampling": True,
    "lantern": False,
    "lvspec": False,
    "fly": False,
    "fly_gate": False,
    "random_relax": False,
}
# LANTERN (decoding.acceptance.lantern): defaults from its release (generate_images.py: k 1000
# of LlamaGen's 16384 codes, delta 0.1; l2 proximity and TVD as the paper's main setting,
# Section 4.1). k counts a token's neighbours besides itself; a toy codebook scales it down.
PROXIMITIES = ("l2", "cosine", "random")  # latent neighbours: Euclidean, cosine, random control
DIVERGENCES = ("tvd", "jsd")  # the bound delta is on TVD, or on JSD in bits
LANTERN_DEFAULTS = {
    "lantern_k": 1000,
    "lantern_delta": 0.1,
    "proximity": "l2",
    "divergence": "tvd",
}
# Loose verification (decoding.acceptance.loose). LVSpec: lambda 0.7 and N 10 (Section 4,
# "Implementation Details"; K 10 is the chain's gamma), PST on as in its Table 1 (the lambda
# and N studies run without it, Table 3). FLy as LVSpec reran it (Appendix C): window 4, entropy
# 0.2 (0.1 for Qwen2.5-VL-32B; FLy's own release: 0.3, window 6). Random relaxation: rho 0.5,
# the middle of LVSpec's Figure 7 grid {0.25, 0.5, 0.75}. PST looks for the target's token
# across the step's whole draft ("we set the draft length K ... as the tolerable shift range",
# Section 3.3, Eq. 11): `pst_range` None and `pst_ahead` False. Not in the paper, to study PST's
# chance matches (a token the draft wrote elsewhere in its K for another reason): `pst_range` r
# looks only r positions either side of the mismatch, `pst_ahead` only after it (where both of
# the paper's Figure 5 cases find it: the draft will still write what the target meant).
LVSPEC_DEFAULTS = {
    "lvspec_lambda": 0.7,
    "lvspec_n": 10,
    "pst": True,
    "pst_range": None,
    "pst_ahead": False,
}
FLY_DEFAULTS = {"fly_entropy": 0.2, "fly_window": 4}
RANDOM_RELAX_DEFAULTS = {"relax_rho": 0.5}
# The hyperparameters a rule adds to a method's (with their defaults) when a method uses it.
ACCEPTANCE_DEFAULTS = {
    "lantern": LANTERN_DEFAULTS,
    "lvspec": LVSPEC_DEFAULTS,
    "fly": FLY_DEFAULTS,
    "fly_gate": {"fly_entropy": FLY_DEFAULTS["fly_entropy"]},
    "random_relax": RANDOM_RELAX_DEFAULTS,
}
# The method hyperparameters each rule reads (passed to it as keyword arguments).
ACCEPTANCE_KEYS = {rule: tuple(ACCEPTANCE_DEFAULTS.get(rule, ())) for rule in ACCEPTANCE}
# Rules that read the target's VQ codebook (its latent neighbours); their targets must have one.
CODEBOOK_RULES = frozenset({"lantern"})
# Rules that read the target's hidden states of the drafted tokens and of the prompt's visual
# tokens; their prompts must hold visual tokens.
VISUAL_RULES = frozenset({"lvspec"})
# Loose verification: rules that accept a mismatched draft token of a text answer outright
# (the report's retention-vs-speedup section).
LOOSE_RULES = frozenset({"lvspec", "fly", "fly_gate", "random_relax"})


def is_lossless(acceptance: str | None, params: dict | None = None) -> bool:
    """Whether a spec with this acceptance rule (None: AR) and hyperparameters preserves the
    target's distribution: a lossy rule with no room to relax (LANTERN delta 0 or k 0, LVSpec
    lambda 0 without PST, random relaxation rho 0) is the lossless rule draw for draw
    (tests/test_lantern.py, tests/test_loose.py)."""
    if acceptance is None or ACCEPTANCE[acceptance]:
        return True
    params = params or {}
    if acceptance == "lantern":
        return 0 in (params.get("lantern_delta"), params.get("lantern_k"))
    if acceptance == "lvspec":  # nothing loosened and no position-shift tolerance
        return params.get("lvspec_lambda") == 0 and params.get("pst") is False
    if acceptance == "random_relax":
        return params.get("relax_rho") == 0
    return False


# What every model drafter accepts, with its default.
DRAFTING = {
    "drafter": "model",
    "views": "M",
    "keep": 0.5,  # view U: share of visual tokens kept
    # view S (SpecVLM): share of visual tokens dropped, and the share of the target's
    # text-to-visual attention mass that the kept tokens should cover before uniform filling
    "drop": 0.9,
    "mass": 0.4,
    "weights": "static",
    "window": 0,  # history window h of the weight policies (0 = the whole history)
    "softmax_temperature": 1.0,
    "adaboost_constant": 1.0,
    "tree": "chain",
    "gamma": 5,
    "paths": None,  # tree "static": the tree as paths of child ranks, e.g. [[0], [1], [0, 0]]
    # tree "dynamic" (EAGLE-2; defaults from its release, ea_model.py: depth 5, top_k 10,
    # total_token 60): expansion rounds after the root's top_k (depth + 1 levels), children per
    # expanded node, nodes kept after reranking by cumulative draft log-probability
    "depth": 5,
    "top_k": 10,
    "total_tokens": 60,
    "acceptance": "greedy",
}

# What every head drafter accepts: the tree and acceptance keys of DRAFTING (a head reads the
# target's own prompt, so no views or ensemble weights) and how it is trained.
HEAD_DRAFTING = {
    **{k: DRAFTING[k] for k in ("tree", "gamma", "paths", "depth", "top_k", "total_tokens")},
    "acceptance": DRAFTING["acceptance"],
    **HEAD_TRAINING,
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
SAGE_KEYS = tuple(k.removeprefix("sage_") for k in SAGE_DEFAULTS)

# EAGLE's 25-node tree (`mc_sim_7b_63` in its choices.py), which SpecVLM's release uses for its
# static trees and SAGE for SD-Tree, SpecVLM and its own first step (SAGE appendix A.1).
EAGLE_TREE = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip

# The hyperparameters each component reads (a key outside its components' sets is rejected when
# it is set explicitly on a method that does not use it).
TREE_KEYS = {
    "chain": ("gamma",),
    "static": ("paths",),
    "dynamic": ("depth", "top_k", "total_tokens"),
    "sage": tuple(SAGE_DEFAULTS),
}

# What each component reads besides its own name. A cell's spec keeps only the keys its
# components read (`read_keys`), so a grid never makes two cells that decode the same thing, and
# a key set on a method that reads it nowhere is an error naming its readers (`readers`).
VIEW_KEYS = {"U": ("keep",), "S": ("drop", "mass")}
# Weight policies mix the views of an ensemble (two or more views; one view has weight 1). The
# adaptive ones keep a history over `window` blocks.
WEIGHT_KEYS = {
    "static": (),
    "random": (),
    "kld": ("window",),
    "tvd": ("window",),
    "grid": ("window",),
    "softmax": ("window", "softmax_temperature"),
    "adaboost": ("window", "adaboost_constant"),
}
# Every head trains on `head_data` with these; each kind reads its own keys too (Kangaroo's
# adapter reads the target's shallow states, not noised features; only EAGLE stacks
# `head_layers` decoder layers).
HEAD_COMMON_KEYS = ("head_data", "head_steps", "head_lr", "head_batch_size")
HEAD_KEYS = {
    "eagle": ("head_noise", "head_layers"),
    "dream": ("head_noise", *DREAM_DEFAULTS),
    "medusa": ("head_noise", *MULTI_HEAD_TRAINING),
    "hydra": ("head_noise", *MULTI_HEAD_TRAINING),
    "kangaroo": tuple(KANGAROO_TRAINING),
}
# Kangaroo's early exit stops a chain; other trees do not read it.
CHAIN_EXIT_KEYS = {"kangaroo": ("kangaroo_exit",)}
IDENTITY_KEYS = ("method", "drafter", "temperature")


def read_keys(spec: dict) -> frozenset[str]:
    """The keys of a resolved spec that its components read (the identity keys included)."""
    keys = set(IDENTITY_KEYS)
    drafter = spec["drafter"]
    if drafter == "none":
        return frozenset(keys)
    tree, rule = spec["tree"], spec["acceptance"]
    keys |= {"tree", "acceptance", *TREE_KEYS.get(tree, ()), *ACCEPTANCE_KEYS.get(rule, ())}
    if drafter in HEAD_DRAFTERS:
        keys |= {*HEAD_COMMON_KEYS, *HEAD_KEYS[drafter]}
        if tree == "chain":
            keys |= set(CHAIN_EXIT_KEYS.get(drafter, ()))
        return frozenset(keys)
    views = spec["views"]
    keys.add("views")
    for view in views:
        keys |= set(VIEW_KEYS.get(view, ()))
    if len(views) > 1:
        keys |= {"weights", *WEIGHT_KEYS.get(spec.get("weights", "static"), ())}
    return frozenset(keys)


def readers(key: str) -> str:
    """The components that read `key`, in words (for errors naming an unread key)."""
    found = [f"view {v!r}" for v, keys in VIEW_KEYS.items() if key in keys]
    found += [f"tree {t!r}" for t, keys in TREE_KEYS.items() if key in keys]
    found += [f"acceptance {r!r}" for r, keys in ACCEPTANCE_KEYS.items() if key in keys]
    policies = [w for w, keys in WEIGHT_KEYS.items() if key in keys]
    if policies:
        found.append(f"weights {', '.join(map(repr, policies))} (an ensemble of two or more views)")
    if key == "weights":
        found.append("an ensemble of two or more views")
    heads = [h for h, keys in HEAD_KEYS.items() if key in keys or key in HEAD_COMMON_KEYS]
    if heads:
        found.append(f"drafter {', '.join(map(repr, heads))}")
    exits = [h for h, keys in CHAIN_EXIT_KEYS.items() if key in keys]
    if exits:
        found.append(f"drafter {', '.join(map(repr, exits))} on a chain")
    return " or ".join(found) or "no component"
