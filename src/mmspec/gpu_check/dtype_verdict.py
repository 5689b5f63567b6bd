"""Whether low-precision greedy SD kept AR's output: a dtype row's verdict and numbers.

Low precision may flip a greedy token where AR's two best logits tie within rounding
(tests/test_dtypes.py): a dtype row passes when SD equals AR or first leaves it at such a
near-tie, and fails on any other difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mmspec.gpu_check.row import Row


def divergence(ar: list[int], ours: list[int], logits: list, dtype) -> float:
    """How far SD's output strays from AR's: 0 when equal; else, at the first token where it
    leaves AR, the gap between AR's best logit and AR's logit of SD's token, in units in the last
    place of the best (inf when one output ends where the other goes on)."""
    from mmspec.scoring.lossless import first_divergence, margin_ulps

    where = first_divergence(ours, ar)
    if where is None:
        return 0.0
    if where >= min(len(ours), len(ar), len(logits)):
        return math.inf
    return margin_ulps(logits[where], ours[where], dtype)


@dataclass
class Decoded:
    """What one method's greedy decodes of the dtype samples gave, against AR's."""

    gaps: list[float] = field(default_factory=list)  # per sample: `divergence`
    ar_repeatable: bool = True  # the timed AR run and the recorded one gave the same tokens
    seconds: dict = field(default_factory=lambda: {"ar": 0.0, "sd": 0.0, "verify": 0.0})
    tokens: dict = field(default_factory=lambda: {"ar": 0, "sd": 0})  # emitted after the first
    steps: dict = field(default_factory=lambda: {"ar": 0, "sd": 0})
    draft_forwards: int = 0
    draft_s: float = 0.0

    def add(self, ar, sd, recorded, logits, dtype) -> None:
        """One sample's timed AR and SD runs, and the AR run whose `logits` were recorded."""
        self.ar_repeatable &= recorded.tokens == ar.tokens
        self.gaps.append(divergence(recorded.tokens, sd.tokens, logits, dtype))
        for role, run in (("ar", ar), ("sd", sd)):
            self.seconds[role] += run.decode_s
            self.tokens[role] += len(run.tokens) - 1
            self.steps[role] += len(run.steps)
        self.seconds["verify"] += sum(step.verify_s for step in sd.steps)


def dtype_row(name: str, decoded: Decoded, tie_ulps: float) -> Row:
    """Equal, or leaving AR only at near-ties (pass, counted), or a real difference (fail);
    tau, speedup and Eq. 1 pooled over the samples as the cells table pools them."""
    gaps = decoded.gaps
    ties = [g for g in gaps if 0 < g <= tie_ulps]
    real = [g for g in gaps if g > tie_ulps]
    row = Row(name, lossless=f"{gaps.count(0.0)}/{len(gaps)} ==AR")
    if ties:
        row.lossless += f", {len(ties)} at ties (<= {max(ties):.1f} ulp)"
    if real:
        row.lossless += f", {len(real)} differ"
        row.status = "FAIL"
        row.why = (
            f"{len(real)} sample(s) leave AR where SD's token is {min(real):.1f} or more units in "
            f"the last place below AR's best logit (a near-tie is <= {tie_ulps:g})"
        )
    if not decoded.ar_repeatable:
        row.status, row.why = "FAIL", "two AR runs of the same sample gave different tokens"
    steps, tokens, seconds = decoded.steps, decoded.tokens, decoded.seconds
    if steps["sd"] and tokens["sd"] and steps["ar"] and tokens["ar"]:
        row.tau = tokens["sd"] / steps["sd"]
        row.speedup = (seconds["ar"] / tokens["ar"]) / (seconds["sd"] / tokens["sd"])
        t_p = seconds["ar"] / steps["ar"]
        row.verify_cost = seconds["verify"] / steps["sd"] / t_p
        if decoded.draft_forwards:
            c = decoded.draft_s / decoded.draft_forwards / t_p
            k = decoded.draft_forwards / steps["sd"]
            row.eq1_ratio = row.speedup / (row.tau / (k * c + 1))
    return row
