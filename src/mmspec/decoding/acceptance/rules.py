"""The acceptance rules as components: each declares its name, the hyperparameters it reads,
whether it preserves the target's distribution and what it requires, and judges a proposal with
its module's function (greedy, sampling, lantern, loose)."""

from __future__ import annotations

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.greedy import accept_greedy
from mmspec.decoding.acceptance.lantern import (
    DIVERGENCES,
    PROXIMITIES,
    Neighbours,
    accept_lantern,
)
from mmspec.decoding.acceptance.loose import (
    accept_fly,
    accept_fly_gate,
    accept_lvspec,
    accept_random_relax,
)
from mmspec.decoding.acceptance.sampling import accept_sampling
from mmspec.decoding.component import CODEBOOK, HIDDEN_STATES, NUMBER, AcceptanceRule, Param


class Rule(AcceptanceRule):
    """A rule with its method's hyperparameters: `verdict` judges one proposal."""

    def __init__(self, **params):
        self.params = params

    @classmethod
    def from_spec(cls, spec: dict, codebook=None) -> Rule:
        return cls(**{p.key: spec[p.key] for p in cls.reads(spec)})

    @property
    def reads_hidden(self) -> bool:
        """Whether it reads the target's hidden states (passed as `hidden` and `visual`)."""
        return HIDDEN_STATES in self.requires

    @staticmethod
    def judge(proposal, logits, temperature, sampler, **params):
        """(accepted path, next token[, relaxed nodes])."""
        raise NotImplementedError

    def verdict(self, proposal, logits, temperature, sampler, **states):
        """(path, next token, relaxed nodes); `states`: hidden and visual, for `reads_hidden`."""
        out = self.judge(proposal, logits, temperature, sampler, **self.params, **states)
        return out if len(out) == 3 else (*out, 0)

    def __call__(self, proposal, logits, temperature, sampler, **states):
        """(path, next token)."""
        return self.verdict(proposal, logits, temperature, sampler, **states)[:2]


@catalog.register
class Greedy(Rule):
    """Argmax match: the target's greedy output, token for token."""

    name = "greedy"
    lossless = True
    judge = staticmethod(accept_greedy)


@catalog.register
class Sampling(Rule):
    """Rejection sampling (Leviathan et al.; Chen et al.; recursive over trees)."""

    name = "sampling"
    lossless = True
    judge = staticmethod(accept_sampling)


@catalog.register
class Lantern(Rule):
    """LANTERN's relaxed acceptance over the target's VQ codebook (decoding.acceptance.lantern).
    Defaults from its release (generate_images.py: k 1000 of LlamaGen's 16384 codes, delta 0.1;
    l2 proximity and TVD as the paper's main setting, Section 4.1). k counts a token's
    neighbours besides itself; a toy codebook scales it down."""

    name = "lantern"
    params = (
        Param(
            "lantern_k",
            int,
            1000,
            "latent neighbours of a code",
            low=0,
            hint="0: no neighbours, lossless",
        ),
        Param(
            "lantern_delta",
            NUMBER,
            0.1,
            "the bound on the divergence",
            low=0,
            high=1,
            meaning="bounds a divergence (TVD, or JSD in bits)",
        ),
        Param("proximity", str, "l2", "how neighbours are found", choices=PROXIMITIES),
        Param("divergence", str, "tvd", "what delta bounds", choices=DIVERGENCES),
    )
    requires = frozenset({CODEBOOK})
    source = "LANTERN's release, generate_images.py (k 1000 of 16384 codes, delta 0.1)"
    judge = staticmethod(accept_lantern)

    @classmethod
    def lossless_with(cls, params: dict) -> bool:
        return 0 in (params.get("lantern_delta"), params.get("lantern_k"))

    @classmethod
    def from_spec(cls, spec: dict, codebook=None) -> Rule:
        if codebook is None:
            raise ValueError(
                f"acceptance {cls.name!r} relaxes over the target's VQ codebook, and this target "
                "has none (an image-generating target with a VQ tokenizer is needed)"
            )
        rule = super().from_spec(spec)
        vectors, offset = codebook
        rule.params["neighbours"] = Neighbours(
            vectors, offset, rule.params["lantern_k"], rule.params["proximity"]
        )
        return rule


class _Loose(Rule):
    loose = True


@catalog.register
class LVSpec(_Loose):
    """LVSpec's loose verification: lambda 0.7 and N 10 (Section 4, "Implementation Details";
    K 10 is the chain's gamma), PST on as in its Table 1. PST looks for the target's token across
    the step's whole draft (Eq. 11): `pst_range` unset and `pst_ahead` false. Not in the paper,
    to study PST's chance matches: `pst_range` r looks only r positions either side of the
    mismatch, `pst_ahead` only after it."""

    name = "lvspec"
    params = (
        Param(
            "lvspec_lambda",
            NUMBER,
            0.7,
            "lambda",
            low=0,
            high=1,
            meaning="is the share of drafted tokens that may mismatch",
        ),
        Param(
            "lvspec_n",
            int,
            10,
            "N",
            low=1,
            meaning="is the number of most similar visual tokens averaged",
        ),
        Param("pst", bool, True, "position-shift tolerance"),
        Param(
            "pst_range",
            int,
            None,
            "PST's tolerable shift",
            low=1,
            optional=True,
            meaning="is PST's tolerable shift in positions (unset: the whole step, K)",
        ),
        Param("pst_ahead", bool, False, "PST looks only after the mismatch"),
    )
    requires = frozenset({HIDDEN_STATES})
    source = "LVSpec, Section 4 (lambda 0.7, N 10) and Eq. 11 (PST)"
    judge = staticmethod(accept_lvspec)

    @classmethod
    def lossless_with(cls, params: dict) -> bool:  # nothing loosened, no shift tolerance
        return params.get("lvspec_lambda") == 0 and params.get("pst") is False


FLY_ENTROPY = Param(
    "fly_entropy", NUMBER, 0.2, "the entropy gate", low=0, meaning="is an entropy (nats)"
)


@catalog.register
class FLy(_Loose):
    """FLy as LVSpec reran it (Appendix C): window 4, entropy 0.2 (0.1 for Qwen2.5-VL-32B;
    FLy's own release: 0.3, window 6)."""

    name = "fly"
    params = (
        FLY_ENTROPY,
        Param(
            "fly_window",
            int,
            4,
            "the deferred window",
            low=1,
            meaning="is FLy's deferred window, counting the mismatch itself",
        ),
    )
    source = "LVSpec, Appendix C (window 4, entropy 0.2)"
    judge = staticmethod(accept_fly)


@catalog.register
class FLyGate(_Loose):
    """FLy's entropy gate without its window (LVSpec's FLY-minus)."""

    name = "fly_gate"
    params = (FLY_ENTROPY,)
    judge = staticmethod(accept_fly_gate)


@catalog.register
class RandomRelax(_Loose):
    """Each mismatch accepted with probability rho: rho 0.5, the middle of LVSpec's Figure 7
    grid {0.25, 0.5, 0.75}."""

    name = "random_relax"
    params = (
        Param(
            "relax_rho",
            NUMBER,
            0.5,
            "rho",
            low=0,
            high=1,
            meaning="is the probability of accepting a mismatch",
        ),
    )
    source = "LVSpec, Figure 7 (rho in {0.25, 0.5, 0.75})"
    judge = staticmethod(accept_random_relax)

    @classmethod
    def lossless_with(cls, params: dict) -> bool:
        return params.get("relax_rho") == 0
