"""Loose verification (lossy): a mismatched draft token may be accepted where a rule judges that
the target's own choice does not matter.

Every rule walks the proposal as its base rule does, the lossless rule of its temperature
(greedy: a child equal to the target's argmax; sampling: min(1, p/q) coins for a chain drawn
from q, point-mass acceptance for deterministic candidates, `acceptance.sampling`) or, for FLy's
rules at temperature > 0, FLy's two draws (below), and differs only at a rejection:
if the rule relaxes the rejected position, the walk accepts the draft's own token there (the
node's first child, the drafter's best) and goes on; otherwise it emits the target's token (the
argmax, or a draw from the residual), as the lossless rule does. The accepted length is thus the
longest prefix whose every position matched or was relaxed (LVSpec's longest-common-prefix).

- `lvspec` (LVSpec, Section 3): the target's final-layer hidden state of each drafted position
  (from the verification forward) against the visual tokens' hidden states (from the prefill):
  cosine similarity, mean of the top `lvspec_n` = visual relevance; the floor(lambda * K) least
  relevant of the step's K drafted positions may mismatch (Eqs. 8-10). With `pst` (Section 3.3,
  Eq. 11) a mismatch whose target token appears among the step's drafted tokens is accepted too.
  Not in the paper, which looks across the whole step: `pst_range` r counts only the drafted
  tokens within r positions (depths) of the mismatch, `pst_ahead` only those after it (deeper).
- `fly` (FLy, AMD-AGI/FLy 6667ae8 `fly/models/FLy.py`, `generate_chunks` and `rej_by_entropy`):
  a mismatch is accepted when the entropy of the target's top-3 probabilities (nats, not
  renormalised; raw logits, in their own dtype) is at least `fly_entropy` and the next
  `fly_window` - 1 drafted positions match exactly (its deferred window). The release then
  undoes every relaxation in the step's last `fly_window` positions (FLy.py:1109), so a relaxed
  mismatch needs the whole window and at least one more drafted position after it: at depth d,
  d + `fly_window` <= the proposal's depth. A threshold <= 0.01 turns the gate off
  (FLy.py:82-83): the window alone decides. At temperature > 0 the release draws the target
  twice per position and accepts a drafted token equal to either draw, emitting the first draw
  at a rejection (FLy.py:129-146); `fly` and `fly_gate` verify so (`Walk(two_draws=True)`),
  lossy even where nothing is relaxed.
- `fly_gate`: FLy's entropy gate alone, with no window and no end mask (the paper's FLY-minus;
  the release's `abla_no_window`, FLy.py:1124-1125).
- `random_relax`: each mismatch accepted with probability `relax_rho`, blind to what it is
  (LVSpec's visually blind control, Figure 7).

How the output relates to the target's: with nothing to relax (lvspec lambda 0 without PST,
random_relax rho 0) each rule is the lossless rule draw for draw (tests check it); FLy's rules
at temperature > 0 are not lossless even then (two draws per position). Otherwise the
output follows another distribution, so quality is measured against AR (retention: judge score
or task metric), never guaranteed. Each step reports how many accepted tokens were relaxed:
those the base rule rejected (a token equal to FLy's second draw is a match, not relaxed).
"""

from __future__ import annotations

import math

from mmspec.decoding import catalog
from mmspec.decoding.acceptance.rule import Rule
from mmspec.decoding.acceptance.sampling import _residual
from mmspec.decoding.component import HIDDEN_STATES, NUMBER, Param
from mmspec.decoding.lazy import torch
from mmspec.decoding.probability import distribution
from mmspec.decoding.proposal import ROOT, Proposal

FLY_TOP = 3  # FLy's entropy reads the target's 3 most probable tokens
FLY_GATE_OFF = 0.01  # FLy's release drops its entropy gate at thresholds up to this (FLy.py:83)


class Walk:
    """The base rule's verdict per node, computed once (coins flipped once, draws made once):
    `step(node)` -> the accepted child or None; `rejected(node)` -> the token the target emits
    after `node` when no child is accepted. The base rule is the lossless rule of the
    temperature, or with `two_draws` (temperature > 0) FLy's: two draws from the target per
    node, a child accepted when its token equals either (the first such child), the first draw
    emitted when none does; q is not read (FLy.py:129-146 `_batch_verification`)."""

    def __init__(
        self, proposal: Proposal, logits: torch.Tensor, temperature, sampler, two_draws=False
    ):
        self.proposal, self.sampler = proposal, sampler
        self.children = proposal.children()
        self.logits = logits
        self.greedy = temperature == 0
        self.two_draws = two_draws and not self.greedy
        self.drawn = not self.greedy and not self.two_draws and proposal.q is not None
        self.steps: dict[int, int | None] = {}
        self.leftover: dict[int, torch.Tensor] = {}  # node -> what the target draws from
        self.emitted: dict[int, int] = {}
        self.draws: dict[int, tuple[int, int | None]] = {}
        if self.greedy:
            self.target = logits.argmax(dim=-1).tolist()  # one host copy, as accept_greedy
            return
        self.p_rows = distribution(logits, temperature)
        if self.drawn:
            if not proposal.is_chain:
                raise ValueError("draws from q are verified only on chains; trees are point masses")
            n = len(proposal.tokens)
            rows = torch.arange(n, device=self.p_rows.device)
            tokens = proposal.tokens_tensor(self.p_rows.device)
            q = proposal.q.to(self.p_rows.dtype)
            self.q = q
            # every coin at once, as the lossless rule flips them
            self.coins = sampler.coins((self.p_rows[rows, tokens] / q[rows, tokens]).clamp(max=1))

    def step(self, node: int) -> int | None:
        if node not in self.steps:
            self.steps[node] = self._step(node)
        return self.steps[node]

    def _step(self, node: int) -> int | None:
        children = self.children.get(node, [])
        if self.greedy:
            want = self.target[node + 1]
            return next((c for c in children if self.proposal.tokens[c] == want), None)
        if self.two_draws:
            drawn = self._two_draws(node)
            return next((c for c in children if self.proposal.tokens[c] in drawn), None)
        if self.drawn:
            child = node + 1
            if children and bool(self.coins[child]):
                return child
            self.leftover[node] = (
                _residual(self.p_rows[child], self.q[child]) if children else self.p_rows[child]
            )
            return None
        p = self.p_rows[node + 1]
        for child in children:
            token = self.proposal.tokens[child]
            if self.sampler.accept(float(p[token])):
                return child
            if p[token] > 0:  # a repeated sibling token was already zeroed
                p = p.clone()
                p[token] = 0
                p = p / p.sum()
        self.leftover[node] = p
        return None

    def _two_draws(self, node: int) -> tuple[int, int | None]:
        """The target's two draws after `node` (first, second); a leaf needs only the first,
        its bonus token."""
        if node not in self.draws:
            p = self.p_rows[node + 1]
            first = self.sampler.categorical(p)
            second = self.sampler.categorical(p) if self.children.get(node) else None
            self.draws[node] = (first, second)
        return self.draws[node]

    def rejected(self, node: int) -> int:
        """The target's token after `node` once its children are rejected (drawn once)."""
        if node not in self.emitted:
            if self.two_draws:
                self.emitted[node] = self._two_draws(node)[0]
            elif self.greedy:
                self.emitted[node] = self.target[node + 1]
            else:
                self.emitted[node] = self.sampler.categorical(self.leftover[node])
        return self.emitted[node]

    def matches_below(self, node: int, n: int) -> bool:
        """Whether n exact matches follow `node` down the proposal."""
        for _ in range(n):
            node = self.step(node)
            if node is None:
                return False
        return True


def walk_loosely(walk: Walk, relaxes) -> tuple[list[int], int, int]:
    """(accepted path, next token, relaxed nodes): follow exact matches; at a rejection accept
    the first child if `relaxes(walk, parent, child)`, else emit the target's token."""
    path, node, relaxed = [], ROOT, 0
    while True:
        child = walk.step(node)
        if child is None:
            children = walk.children.get(node, [])
            if not children or not relaxes(walk, node, children[0]):
                return path, walk.rejected(node), relaxed
            child, relaxed = children[0], relaxed + 1
        path.append(child)
        node = child


def visual_relevance(hidden: torch.Tensor, visual: torch.Tensor, n: int) -> torch.Tensor:
    """LVSpec's Eq. 8: per drafted position [K, H], the mean of its top-n cosine similarities
    with the visual tokens' hidden states [l_v, H]."""
    h = torch.nn.functional.normalize(hidden.float(), dim=-1)
    v = torch.nn.functional.normalize(visual.float().to(h.device), dim=-1)
    return (h @ v.T).topk(min(n, v.shape[0]), dim=-1).values.mean(-1)


def loosened(relevance: torch.Tensor, share: float) -> set[int]:
    """Eq. 9: the floor(share * K) positions of lowest relevance (ties: the earlier first)."""
    count = math.floor(share * len(relevance) + 1e-9)
    order = sorted(range(len(relevance)), key=lambda i: (float(relevance[i]), i))
    return set(order[:count])


def accept_lvspec(
    proposal: Proposal,
    logits: torch.Tensor,
    temperature,
    sampler,
    *,
    lvspec_lambda: float,
    lvspec_n: int,
    pst: bool,
    hidden: torch.Tensor,
    visual: torch.Tensor,
    pst_range: int | None = None,
    pst_ahead: bool = False,
):
    """LVSpec's loose verification; `hidden`: the target's last-layer states of the drafted
    nodes [K, H] (verification forward), `visual`: those of the prompt's visual tokens."""
    walk = Walk(proposal, logits, temperature, sampler)
    loose = loosened(visual_relevance(hidden, visual, lvspec_n), lvspec_lambda)
    shifted = _shift_tolerance(proposal, pst_range, pst_ahead)

    def relaxes(walk, parent, child):
        return child in loose or (pst and walk.rejected(parent) in shifted(child))

    return walk_loosely(walk, relaxes)


def _shift_tolerance(proposal: Proposal, pst_range: int | None, pst_ahead: bool):
    """node -> the drafted tokens PST compares the target's token at `node` with: the whole
    step's (Eq. 11), or those within `pst_range` depths of the node, and with `pst_ahead` only
    those deeper than it."""
    if pst_range is None and not pst_ahead:
        drafted = set(proposal.tokens)
        return lambda node: drafted
    depths = proposal.depths()
    furthest = math.inf if pst_range is None else pst_range
    nearest = 1 if pst_ahead else -furthest  # the shifts (depth - the node's) that count
    return lambda node: {
        token
        for token, depth in zip(proposal.tokens, depths, strict=True)
        if nearest <= depth - depths[node] <= furthest
    }


def top_entropy(logits: torch.Tensor, top: int = FLY_TOP) -> torch.Tensor:
    """FLy's gate signal: -sum p log p over the `top` most probable tokens (nats, from the raw
    logits, not renormalised), in the logits' own dtype as the release computes it
    (FLy.py:358-371 `calculate_topk_entropy`): bf16 logits give bf16 entropies."""
    logp = torch.log_softmax(logits, dim=-1).topk(top, dim=-1).values
    return -(logp.exp() * logp).sum(-1)


def entropy_gate(logits: torch.Tensor, fly_entropy: float):
    """node -> whether FLy's gate lets a mismatch among the node's children through: the
    entropy of the target's row there reaches the threshold, compared in the entropy's dtype
    (the release's `t_entropy < thre`, FLy.py:407); no gate at thresholds <= 0.01 (FLy.py:83)."""
    if fly_entropy <= FLY_GATE_OFF:
        return lambda node: True
    entropy = top_entropy(logits)
    return lambda node: not bool(entropy[node + 1] < fly_entropy)


def accept_fly(
    proposal: Proposal,
    logits: torch.Tensor,
    temperature,
    sampler,
    *,
    fly_entropy: float,
    fly_window: int,
):
    """FLy: the entropy gate, the deferred window and the release's end mask (a relaxed
    mismatch at depth d needs d + fly_window <= the proposal's depth, FLy.py:1098-1109)."""
    walk = Walk(proposal, logits, temperature, sampler, two_draws=True)
    gate = entropy_gate(logits, fly_entropy)
    depths = proposal.depths()
    deepest = max(depths, default=0)

    def relaxes(walk, parent, child):
        return (
            depths[child] + fly_window <= deepest
            and gate(parent)
            and walk.matches_below(child, fly_window - 1)
        )

    return walk_loosely(walk, relaxes)


def accept_fly_gate(proposal: Proposal, logits: torch.Tensor, temperature, sampler, *, fly_entropy):
    """FLy's entropy gate alone (FLY-minus): every mismatch the gate passes, to the last
    drafted position (the release's `abla_no_window` replaces the window's verdict by the
    gate's, FLy.py:1124-1125)."""
    walk = Walk(proposal, logits, temperature, sampler, two_draws=True)
    gate = entropy_gate(logits, fly_entropy)
    return walk_loosely(walk, lambda walk, parent, child: gate(parent))


def accept_random_relax(
    proposal: Proposal, logits: torch.Tensor, temperature, sampler, *, relax_rho: float
):
    """Each mismatch accepted with probability rho (no draw at all when rho is 0)."""
    walk = Walk(proposal, logits, temperature, sampler)

    def relaxes(walk, parent, child):
        return relax_rho > 0 and sampler.accept(relax_rho)

    return walk_loosely(walk, relaxes)


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
    "fly_entropy",
    NUMBER,
    0.2,
    "the entropy gate",
    low=0,
    meaning="is an entropy (nats)",
    hint="<= 0.01: no gate, as FLy's release",
)


@catalog.register
class FLy(_Loose):
    """FLy as LVSpec reran it (Appendix C): window 4, entropy 0.2 (0.1 for Qwen2.5-VL-32B;
    FLy's own release, fly_config/FLy_Llama3_70b.json: 0.3, window 6, K 15). The rule is the
    release's (fly/models/FLy.py): its end mask, its two draws at temperature > 0, its
    entropy's dtype and no gate at thresholds <= 0.01."""

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
    """FLy's entropy gate without its window (LVSpec's FLY-minus; the release's
    `abla_no_window`), with FLy's two draws at temperature > 0. At a threshold <= 0.01 there is
    no gate, so every drafted token is accepted (the release's own FLY-minus has no verdict
    there: it reads a gate it never computed, FLy.py:1094 and 1124-1125)."""

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
