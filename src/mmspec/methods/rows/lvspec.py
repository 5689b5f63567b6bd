"""LVSpec and the loose baselines it compares with (its Table 1 and Figure 7), all on a chain of
K = 10 draft tokens (Section 4: "the same number of draft tokens (K = 10), forming a chain-like
structure") from a draft that reads 10% of the visual tokens (Std.-SD: the draft with uniform
video token pruning, as SpecVLM's).

FLy's rules follow AMD-AGI/FLy 6667ae8 fly/models/FLy.py: the end mask (:1098-1109: no
relaxation in the last window positions), two target draws per position at temperature > 0
(:129-146), the entropy in the logits' dtype (:358-371) and no gate at thresholds <= 0.01
(:82-83); FLY-minus is the release's `abla_no_window` (:1124-1125). Their windows and thresholds
are LVSpec's rerun (Appendix C), not the release's K 15, window 6, threshold 0.3
(fly_config/FLy_Llama3_70b.json).
"""

from __future__ import annotations

from mmspec.methods.rows.row import drafting

CHAIN = dict(gamma=10, views="U", keep=0.1)

ROWS = [
    drafting(
        "lvspec",
        "LVSpec",
        "LVSpec's loose verification: the lambda*K drafted tokens least relevant to the "
        "visual tokens (mean top-N cosine of the target's last-layer states) may mismatch; "
        "position-shift tolerance on",
        acceptance="lvspec",
        **CHAIN,
    ),
    drafting(
        "lvspec_nopst",
        "LVSpec (w/o PST)",
        "LVSpec without position-shift tolerance (its lambda and N studies, Table 3)",
        acceptance="lvspec",
        **CHAIN,
        pst=False,
    ),
    drafting(
        "fly",
        "FLY",
        "FLy: a mismatch is accepted when the target's top-3 entropy reaches the threshold "
        "and the next window - 1 drafted tokens match, with at least one drafted token "
        "after the window (the release's end mask)",
        acceptance="fly",
        **CHAIN,
    ),
    drafting(
        "fly_gate",
        "FLY⊖",
        "FLy's entropy gate without its deferred window (LVSpec's FLY-minus)",
        acceptance="fly_gate",
        **CHAIN,
    ),
    drafting(
        "random_relax",
        "Random relaxation",
        "each mismatch accepted with probability rho, blind to the visual content "
        "(LVSpec's Figure 7 control)",
        acceptance="random_relax",
        **CHAIN,
    ),
]
