"""The reproduction scorecard, first on the page: one row per paper's claim (config/claims/),
its verdict on this sweep's cells, the paper's numbers beside the measured ones, and a link to
the section whose figure shows it."""

from __future__ import annotations

import pandas as pd

from mmspec.claims import scorecard
from mmspec.claims.checks import NOT_APPLICABLE, VERDICTS
from mmspec.report.formatting import esc, heading

ANCHOR = "reproduction"
TITLE = "Reproduction: the papers' claims"
VERDICT_CLASS = {v: "v-" + v.replace(" ", "-") for v in VERDICTS}
CSS = """
.verdict { font-weight: 600; padding: 0 0.3rem; border-radius: 3px; white-space: nowrap; }
.v-holds { background: #dff3e4; color: #17612f; }
.v-fails { background: #fbe2e2; color: #8a1c1c; }
.v-inconclusive { background: #fdf1d6; color: #7a5200; }
.v-not-applicable { background: #eee; color: #666; }
table.claims { border-collapse: collapse; table-layout: fixed; width: 100%; }
table.claims td, table.claims th { border-bottom: 1px solid #ddd; padding: 0.3rem 0.5rem;
  text-align: left; vertical-align: top; white-space: normal; overflow-wrap: anywhere; }
table.claims th:nth-child(1) { width: 7rem; }
table.claims th:nth-child(2) { width: 5rem; }
table.claims th:nth-child(3) { width: 28%; }
table.claims th:nth-child(4) { width: 22%; }
table.claims th:nth-child(6) { width: 3.5rem; }
"""


def render(claims: pd.DataFrame | None, sections: set[str]) -> str:
    """The section from the claims table (CLAIMS rows); "" without one. `sections`: the anchors
    the page has, so a claim links only to a section that is there."""
    if claims is None:
        return ""
    parts = [heading(ANCHOR, TITLE)]
    if claims.empty:
        return parts[0] + "<p class='note'>No claims were checked.</p>"
    counts = scorecard.counts(claims)
    tally = ", ".join(f"{n} {v}" for v, n in counts.items())
    parts.append(
        f"<p class='note'>{tally}. Each claim is checked on every set of cells it names (a "
        "dataset, pair, temperature and seed): two values differ only where their 95% intervals "
        "do not overlap, else the set is inconclusive, and so is a value without an interval "
        "(FID; a mean over datasets takes theirs) (what the point estimates alone say is "
        "given beside it where it differs); a claim holds where every set holds and "
        "fails where every set fails. Not applicable: the sweep lacks its cells. A claim's "
        "check is in config/claims/&lt;paper&gt;.yaml; <code>mmspec claims RESULTS...</code> "
        "pools several results folders.</p>"
    )
    found = scorecard.summary(claims)
    harness = found["harness"].astype(bool)
    parts.append(_table(found[~harness], sections))
    if harness.any():
        tally = ", ".join(f"{n} {v}" for v, n in scorecard.counts(claims, harness=True).items())
        parts.append(
            "<h3>Harness checks</h3><p class='note'>Identities of mmspec itself (they hold by "
            "construction when the harness is right), not results of the papers: counted apart "
            f"from the claims above. {tally}.</p>"
        )
        parts.append(_table(found[harness], sections))
    return "\n".join(parts)


def _table(found: pd.DataFrame, sections: set[str]) -> str:
    """The claims of `found` (scorecard.summary rows), one table row each."""
    rows = []
    for _, claim in found.iterrows():
        verdict = claim["verdict"]
        badge = f"<span class='verdict {VERDICT_CLASS[verdict]}'>{esc(verdict)}</span>"
        measured = "<br>".join(
            f"{esc(r['set'] + ': ' if r['set'] else '')}{esc(_verdict(r))}: {esc(r['measured'])}"
            for _, r in claim["rows"].iterrows()
        )
        notes = []
        if verdict != "holds" and claim["shown_by"]:
            lacks = "This sweep does not show it; " if verdict == NOT_APPLICABLE else ""
            notes.append(f"{lacks}config/presets/{esc(claim['shown_by'])}.yaml studies it in full.")
        if claim["note"]:
            notes.append(esc(claim["note"]))
        link = claim["section"]
        see = f"<a href='#{esc(link)}'>figure</a>" if link in sections else ""
        cells = [
            badge,
            esc(claim["paper"]),
            esc(claim["claim"]) + "".join(f"<br><small>{n}</small>" for n in notes),
            f"{esc(claim['where'])}<br><small>{esc(claim['paper_numbers'])}</small>",
            f"<small>{measured}</small>",
            see,
        ]
        rows.append(
            f"<tr class='{VERDICT_CLASS[verdict]}-row'>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("verdict", "paper", "claim", "paper says", "measured", "see")
    )
    return (
        f"<table class='claims'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _verdict(row) -> str:
    """A set's verdict, and the points' alone where they differ."""
    if row["by_points"] == row["verdict"]:
        return row["verdict"]
    return f"{row['verdict']} (by the points alone: {row['by_points']})"
