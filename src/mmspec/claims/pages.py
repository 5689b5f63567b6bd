"""The claims in Markdown, as the paper pages of the docs show them: each paper's claim table,
rendered from its claims file (a docs test keeps the pages equal to it, so a page cannot drift
from what the scorecard checks), and a scorecard's verdicts, one column per scorecard."""

from __future__ import annotations

import pandas as pd

from mmspec.claims import scorecard
from mmspec.claims.checks import NOT_APPLICABLE
from mmspec.claims.claim import Claim


def markdown_cell(text) -> str:
    """A Markdown table cell: one line, pipes escaped (also the reference pages')."""
    return " ".join(str(text).split()).replace("|", "\\|")


def definitions(claims: list[Claim]) -> str:
    """The claim table of a paper page: per claim its id and sentence, where the paper states it
    and the paper's numbers; a paper column when the claims are of several papers; harness
    checks marked as such; then the claims' notes (deviations, what the toy world cannot show)."""
    papers = list(dict.fromkeys(c.paper for c in claims))
    several = len(papers) > 1
    head = ["paper"] * several + ["claim", "where", "the paper's numbers"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in claims:
        mark = " (harness check)" if c.harness else ""
        what = f"`{c.id}`{mark}: {markdown_cell(c.claim)}"
        row = [c.paper] * several + [what, markdown_cell(c.where), markdown_cell(c.paper_numbers)]
        lines.append("| " + " | ".join(row) + " |")
    notes = [f"- `{c.id}`: {' '.join(c.note.split())}" for c in claims if c.note]
    if notes:
        lines += ["", "Notes on these claims:", "", *notes]
    return "\n".join(lines)


def _verdict(row: pd.Series) -> str:
    """A claim's verdict over its sets, with the sets' tally where there are several and the
    points' reading where it differs."""
    if row["verdict"] == NOT_APPLICABLE:
        return "n/a"
    notes = []
    if row["sets"] > 1:
        tally = [
            f"{row[f'n_{v}']} {v}" for v in ("holds", "fails", "inconclusive") if row[f"n_{v}"]
        ]
        notes.append(", ".join(tally) + f" of {row['sets']}")
    if row["n_holds_by_points"] != row["n_holds"]:
        notes.append(f"points: {row['n_holds_by_points']} hold")
    return row["verdict"] + (f" ({'; '.join(notes)})" if notes else "")


def verdicts(tables: dict[str, pd.DataFrame], papers: list[str] | None = None) -> str:
    """The verdicts of several scorecards (`mmspec claims` rows, by column title) side by side:
    one row per claim of `papers` (every paper when None), harness checks last and marked."""
    summaries = {title: scorecard.summary(table) for title, table in tables.items()}
    order: dict[tuple[str, str], bool] = {}
    for rows in summaries.values():
        for _, row in rows.iterrows():
            if papers is None or row["paper"] in papers:
                order.setdefault((row["paper"], row["claim_id"]), bool(row["harness"]))
    keys = sorted(order, key=lambda k: order[k])  # stable: the papers' claims, then harness
    several = len({paper for paper, _ in keys}) > 1
    head = ["paper"] * several + ["claim"] + list(tables)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for paper, claim_id in keys:
        cells = []
        for rows in summaries.values():
            found = rows[(rows["paper"] == paper) & (rows["claim_id"] == claim_id)]
            cells.append(_verdict(found.iloc[0]) if len(found) else "n/a")
        name = f"`{claim_id}`" + (" (harness check)" if order[(paper, claim_id)] else "")
        lines.append("| " + " | ".join([paper] * several + [name] + cells) + " |")
    return "\n".join(lines)
