"""Methods as data: a method is a named composition drafter x view x tree policy x acceptance rule.

A cell's method spec is the registry entry's defaults overridden by the config's hyperparameters,
so a new combination is a new entry (or a config override), never new decoding code.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from mmspec import plugins
from mmspec.decoding import catalog
from mmspec.decoding.drafters.medusa import MEDUSA_TREE
from mmspec.decoding.trees import EAGLE_TREE
from mmspec.methods.components import (
    AR,
    TEMPERATURE,
    parts,
    read_keys,
    read_params,
    readers,
)

# A method row names its components; each component's declared defaults fill the rest.
DRAFTING = {"drafter": "model", "views": "M", "tree": "chain", "acceptance": "greedy"}
HEAD = {"acceptance": "greedy"}  # a head drafter names its drafter and tree


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
            "views M and T, weights ln(1/error - 1) + C ln(K - 1) from each view's argmax error "
            "rate over every verified position, divided by their sum; +-1e5 at error rate 0 or "
            "1 and negative weights kept, as TABED's release computes them "
            "(candidate_generator_vlmsd.py, get_candidates: agg_ftn; pick_next_token); equal "
            "weights where they sum to 0 (the release divides by zero there)",
            views="MT",
            weights="adaboost",
        ),
    ]
    return rows


def _lantern_rows() -> list[Method]:
    """LANTERN (image generation) over a draft model's chain and EAGLE-2 trees, over EAGLE's
    head (the paper's drafter: EAGLE-2 on LlamaGen), and the paper's
    ablations of the neighbourhood (Table 4: cosine and random proximity; JSD for TVD). The
    defaults are the release's (the rule's declaration, decoding.acceptance.lantern.Lantern): k 1000
    of LlamaGen's 16384 codes, so a smaller codebook sets lantern_k below its size. Over trees
    the rule follows jadohu/LANTERN's models/ea_model_llamagen.py `evaluate_posterior`: greedy
    takes the longest accepted path over every root-to-leaf path (:893-903; ties: the first leaf
    in proposal order); after a rejected candidate under sampling mmspec zeroes its relaxed set
    A (lossless at delta 0), and `lantern_sibling_mask: release` zeroes instead x and its k + 1
    nearest codes as the release does (:769-773)."""
    lantern = dict(acceptance="lantern")
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
            "paper's drafter shape); greedy accepts the longest passing path, as the release",
            tree="dynamic",
            **lantern,
        ),
        Method(
            "lantern_eagle2",
            "LANTERN's relaxed acceptance over EAGLE-2: EAGLE's head trained on the image "
            "target's own features, guided as the target, growing dynamic trees (the paper's "
            "drafter, Section 4.1)",
            {"drafter": "eagle", "tree": "dynamic", **lantern},
            "LANTERN (EAGLE-2 head)",
        ),
        Method(
            "lantern_eagle",
            "LANTERN's relaxed acceptance over a chain of gamma codes from EAGLE's head",
            {"drafter": "eagle", "tree": "chain", **lantern},
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
    with uniform video token pruning, as SpecVLM's). FLy's rules follow AMD-AGI/FLy 6667ae8
    fly/models/FLy.py: the end mask (:1098-1109: no relaxation in the last window positions),
    two target draws per position at temperature > 0 (:129-146), the entropy in the logits'
    dtype (:358-371) and no gate at thresholds <= 0.01 (:82-83); FLY-minus is the release's
    `abla_no_window` (:1124-1125). Their windows and thresholds are LVSpec's rerun (Appendix C),
    not the release's K 15, window 6, threshold 0.3 (fly_config/FLy_Llama3_70b.json)."""
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
        ),
        _drafting(
            "lvspec_nopst",
            "LVSpec (w/o PST)",
            "LVSpec without position-shift tolerance (its lambda and N studies, Table 3)",
            acceptance="lvspec",
            **chain,
            pst=False,
        ),
        _drafting(
            "fly",
            "FLY",
            "FLy: a mismatch is accepted when the target's top-3 entropy reaches the threshold "
            "and the next window - 1 drafted tokens match, with at least one drafted token "
            "after the window (the release's end mask)",
            acceptance="fly",
            **chain,
        ),
        _drafting(
            "fly_gate",
            "FLY⊖",
            "FLy's entropy gate without its deferred window (LVSpec's FLY-minus)",
            acceptance="fly_gate",
            **chain,
        ),
        _drafting(
            "random_relax",
            "Random relaxation",
            "each mismatch accepted with probability rho, blind to the visual content "
            "(LVSpec's Figure 7 control)",
            acceptance="random_relax",
            **chain,
        ),
    ]


def _head_rows() -> list[Method]:
    """Trained heads on the target's features (DREAM's Table 1 baselines), trained by stage
    train_drafter with `head_*` hyperparameters (decoding.drafters.trained.HEAD_TRAINING)."""
    return [
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
        *_dream_rows(),
    ]


def _dream_rows() -> list[Method]:
    """DREAM (its tree: k 4, depth 6, 32 tokens) and its ablations (Sections 4.3-4.4), as its
    release (SAI-Lab-NYU/DREAM) builds, trains and drafts: the head of `model/cnets.py` `Model`
    (l. 650-825: a decoder block over token embeddings alone, l. 768; a cross-attention block
    over the target's raw features, l. 472-648; a decoder block; a norm), drafting as its
    `topK_genrate` (l. 831-1009: a node fed its embedding, its parent's output appended to the
    memory, l. 876, 886, 910), intermediate features hidden_states[l] scored by attentions[l]
    (`ge_data/ge_data_all_llava_mix665k.py` `mid_feature_collect`, l. 124-145) and the loss
    weighting of `train/main_deepspeed.py` (l. 222-236, 312: 0.2 x feature, 1.0 x intermediate
    over all padded positions, 1.0 x the KL's mean over the vocabulary; `dream_loss: paper` is
    Section 4.1's 0.2, 0.2, 1.0). VTC is mmspec's (the release's call is commented out,
    `model/utils.py` l. 308): docs/papers/dream.md."""
    dream = {
        **HEAD,
        "drafter": "dream",
        "tree": "dynamic",
        "depth": 6,
        "top_k": 4,
        "total_tokens": 32,
    }
    return [
        Method(
            "dream",
            "DREAM: a decoder block over token embeddings, gated cross-attention over the "
            "target's verified features (75% of the visual tokens kept) and the drafted path's "
            "outputs, a decoder block; trained with the intermediate feature of the "
            "lowest-entropy layer per token and the release's loss weighting",
            dream,
            "DREAM",
        ),
        Method(
            "dream_nocross",
            "DREAM without its cross-attention block (Table 2's w/o CA): the target's features "
            "then never reach the head, two decoder blocks over token embeddings",
            {**dream, "dream_cross": False},
            "DREAM w/o CA",
        ),
        Method(
            "dream_fixed",
            "DREAM with the intermediate feature of a fixed layer, at the share "
            "`dream_fixed_depth` of the target's depth: half by default (Figure 4a's "
            "Static-50%; Section 4.2 also runs 25% and 75%, its strongest static setting). The "
            "release has no fixed-layer mode (ge_data `mid_feature_collect` picks by entropy "
            "only): the layer is hidden_states[floor(share x layers)], the paper's wording",
            {**dream, "dream_intermediate": "fixed"},
            "DREAM (S-50%)",
        ),
        Method(
            "dream_nointer",
            "DREAM without intermediate feature distillation (Figure 4a's No Mid)",
            {**dream, "dream_intermediate": "none"},
            "DREAM (no mid)",
        ),
        Method(
            "dream_paperloss",
            "DREAM trained with the paper's loss weights (Section 4.1: 0.2 feature, 0.2 "
            "intermediate, 1.0 KL summed over the vocabulary, on the answer positions) in place "
            "of its release's (train/main_deepspeed.py)",
            {**dream, "dream_loss": "paper"},
            "DREAM (paper loss)",
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
            "rest of the budget int(N (1 - drop)) uniform; its release's `utils/utils.py`, "
            "`drop_visual_tokens_specvlm`) and drafts EAGLE's 25-node static tree",
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
        ),
        *_lantern_rows(),
        *_loose_rows(),
        *_head_rows(),
    ]
}


# Installed plugins add method rows (a `Method`, or a list of them) through this entry point
# group; their component classes join the catalog through `catalog.GROUP`.
METHOD_GROUP = "mmspec.methods"


def _plugin_rows() -> list[Method]:
    """The method rows installed plugins add (entry point group `mmspec.methods`)."""
    rows = []
    for _, loaded in plugins.load_group(METHOD_GROUP, "method", catalog.CatalogError):
        found = loaded if isinstance(loaded, list | tuple) else [loaded]
        rows += [row for row in found if isinstance(row, Method)]
    for row in rows:
        if row.name in METHODS:
            raise catalog.CatalogError(
                f"a plugin's method {row.name!r} has the name of a method mmspec defines"
            )
        METHODS[row.name] = row
    return rows


PLUGIN_METHODS = _plugin_rows()

# The keys that choose a component, and the kind each one names.
CHOOSERS = {"drafter": "drafter", "tree": "tree", "acceptance": "acceptance"}


def known_params() -> dict[str, object]:
    """key -> Param of every hyperparameter some component in the catalog reads (the first
    declaration of a key wins; components sharing a key declare it alike)."""
    found = {TEMPERATURE.key: TEMPERATURE}
    for kind in ("drafter", "view", "weights", "tree", "acceptance"):
        for component in catalog.components(kind).values():
            for param in component.params:
                found.setdefault(param.key, param)
    return found


def resolve(method_name: str, hparams: dict, temperature: float = 0.0, strict: bool = True) -> dict:
    """The spec of `method_name` with `hparams` applied (`temperature` unless they set one):
    the row's components, every hyperparameter they read (their declared defaults where
    neither sets one), and nothing else (`components.read_keys`). Raises ValueError naming the
    key on an unknown key, a value outside its declared type or range, or a combination that
    cannot run. A key of `hparams` that no component of the result reads is an error, unless
    not `strict` (one point of a grid, where another point may read it: config checks the grid
    as a whole)."""
    if method_name not in METHODS:
        raise ValueError(
            f"unknown method {method_name!r}; known: {sorted(METHODS)} (a package adds method "
            f"rows through the entry point group {METHOD_GROUP}: is it installed?)"
        )
    row = METHODS[method_name].defaults
    spec = {**row, **hparams, "method": method_name}
    spec.setdefault(TEMPERATURE.key, temperature)
    # the components first: a key of an unknown component is no hyperparameter of the others
    _check_choices(spec, row, method_name)
    # a component's defaults, then those of the parts it names (a drafter's views, weights)
    for _ in range(2):
        for param in read_params(spec):
            spec.setdefault(param.key, param.default)
    known = known_params()
    for key in hparams:
        if key not in known and key not in CHOOSERS:
            close = difflib.get_close_matches(key, [*known, *CHOOSERS], n=3)
            guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"method {method_name!r} has no hyperparameter {key!r}: it {composition(spec)}, "
                f"and no other component of the catalog reads {key!r}{guess} (the method "
                "catalogue, docs/reference/methods.md, lists every component's)"
            )
    read = read_keys(spec)
    unread = [key for key in hparams if key not in read]
    if strict and unread:
        raise ValueError(unread_key_error(unread[0], method_name, spec))
    # a `lantern_eagle` verifying with `sampling` is exact, and its cell carries no delta; a
    # single view has no ensemble weights: keys no component reads are not part of the cell
    spec = {key: value for key, value in spec.items() if key in read}
    for param in read_params(spec):
        problem = param.problem(spec.get(param.key))
        if problem is not None:
            raise ValueError(problem)
    for part in parts(spec):
        part.check(spec)
    if spec["drafter"] != AR and spec["acceptance"] == "greedy" and spec["temperature"] > 0:
        raise ValueError(
            f"acceptance 'greedy' with temperature {spec['temperature']}: greedy acceptance "
            "decodes the target's argmax; to sample at temperature > 0 use acceptance 'sampling'"
        )
    return spec


def _check_choices(spec: dict, row: dict, method_name: str) -> None:
    """The component names of a spec are in the catalog; AR stays AR."""
    drafter = spec["drafter"]
    if row["drafter"] == AR:
        if drafter != AR:
            raise ValueError(
                f"drafter={drafter!r} is not one of [{AR!r}] for method {method_name!r}: AR has "
                "no drafter; sweep a drafting method (sd, eagle, ...) to draft"
            )
        return
    for key, kind in CHOOSERS.items():
        names = sorted(catalog.components(kind))
        if spec.get(key) not in names:
            if key == "drafter" and spec.get(key) in (AR, None):
                raise ValueError(
                    f"drafter={spec.get(key)!r} is not one of {names} for method "
                    f"{method_name!r}: every drafting method has a drafter; to decode "
                    "autoregressively use `method: ar`, which has no views or gamma"
                )
            raise ValueError(
                f"unknown {kind}: {key}={spec.get(key)!r} is not one of {names}. A "
                f"package adds components through the entry point group {catalog.GROUP}: is "
                "the one that provides it installed?"
            )


def unread_key_error(key: str, method_name: str, spec: dict) -> str:
    """Why `key` is refused on a method whose components do not read it."""
    return (
        f"{key} is read only by {readers(key)}, and method {method_name!r} here "
        f"{composition(spec)}{_swap_hint(key)}"
    )


def _swap_hint(key: str) -> str:
    """How an entry comes to read `key`: the component that reads it swapped in (a drafter,
    tree or rule by its key, a view by `views`), when one component does."""
    found = [
        (kind, name)
        for kind in ("drafter", "tree", "acceptance", "view")
        for name, part in catalog.components(kind).items()
        if key in (p.key for p in part.params)
    ]
    if len(found) != 1:
        return ""
    kind, name = found[0]
    choice = "views" if kind == "view" else kind
    return f"; to use it, set `{choice}: {name}` in the entry (or use a method that composes it)"


def composition(spec: dict) -> str:
    """What a resolved spec composes, each component with the hyperparameters it reads."""
    if spec["drafter"] == AR:
        return "decodes autoregressively (no drafter) and reads temperature"
    described = []
    for part in parts(spec):
        keys = [p.key for p in part.params] if part.kind != "drafter" else _own_keys(part, spec)
        described.append(f"{part.kind} {part.name!r} ({', '.join(keys) or 'no hyperparameters'})")
    return "composes " + ", ".join(described) + " and reads temperature"


def _own_keys(drafter, spec: dict) -> list[str]:
    """A drafter's own keys (a model drafter also reads its views' and weight policy's)."""
    others = {p.key for part in parts(spec) if part is not drafter for p in part.params}
    return [p.key for p in drafter.reads(spec) if p.key not in others]


def label(entry: str, method: str) -> str:
    """Display name of a config entry: the paper's row name when it is a registry method."""
    registered = METHODS.get(entry)
    if registered is not None and registered.label and entry == method:
        return registered.label
    return entry
