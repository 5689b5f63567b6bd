"""Searches (docs/search.md): per searched method, dataset and pair, the points each round chose,
the hypervolume their frontier covers after each round, and the best setting for each target.

Values are the cells' measured means over their seeds (the report's, not the optimizer's
pessimistic ones). The hypervolume's reference point is the search's own worst value of each
objective, less 1% of its range, so the last round's share is 1 and earlier rounds show how much
of the final frontier they had found.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import esc, fmt_num, heading
from mmspec.sweep.hypervolume import frontier, hypervolume, reference
from mmspec.sweep.search_space import Objective, parse_constraint

ANCHOR = "searches"
TITLE = "Searches: rounds, hypervolume and best settings"
CAPTION = (
    "A searched method decodes its budget's points in rounds: round 1 a space-filling design, "
    "each later round chosen by the optimizer from the earlier rounds' cells (docs/search.md). "
    "Per search: every point by round (a point another entry's grid holds is that grid's cell), "
    "the hypervolume the frontier of the points so far covers, as a share of the final one, and "
    "the fastest setting meeting each target, with the 95% interval of its speedup."
)
# targets every search is read against (beside its own constraints)
RETENTION_TARGET = 0.99


@dataclass
class SearchRounds:
    """A search's rounds as the report reads them: per round, (point, its cells' method, hp)."""

    dataset: str
    pair: str
    method: str
    objectives: list[str]
    constraints: list[str]
    rounds: list[list[tuple[dict, str, str]]]


def load(sweep: dict, results: str = "results") -> list[SearchRounds]:
    """The proposed rounds of every search of a validated sweep config."""
    from mmspec.search.rounds import Rounds
    from mmspec.sweep.cells import cells as grid_cells

    rounds = Rounds(sweep, grid_cells(sweep), {}, results=results, plan_batches=False)
    seeds = len(sweep["seeds"])
    out = {}
    for found in rounds.proposed():
        run = found.run
        entry = out.setdefault(
            run.id,
            SearchRounds(
                run.dataset, run.pair, run.search.name,
                [o.metric for o in run.search.objectives],
                [c.text for c in run.search.constraints], [],
            ),
        )  # fmt: skip
        entry.rounds.append(
            [
                (point, found.cells[i * seeds].method, found.cells[i * seeds].hp)
                for i, point in enumerate(found.points)
            ]
        )
    return list(out.values())


def render(pooled: pd.DataFrame, searches: list[SearchRounds]) -> str:
    """The section of the seeds-pooled rows `pooled`, or "" without searches."""
    parts = [render_search(pooled, s) for s in searches]
    parts = [p for p in parts if p]
    if not parts:
        return ""
    return "\n".join([heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>", *parts])


def point_rows(pooled: pd.DataFrame, search: SearchRounds) -> pd.DataFrame:
    """One row per point: its round, setting and pooled cell row (points without one left out)."""
    index = {(r["dataset"], r["pair"], r["method"], r["hp"]): r for r in pooled.to_dict("records")}
    rows = []
    for number, points in enumerate(search.rounds, start=1):
        for point, method, hp in points:
            row = index.get((search.dataset, search.pair, method, hp))
            if row is not None:
                rows.append({**row, "_round": number, "_point": json.dumps(point)})
    return pd.DataFrame(rows)


def _measured(rows: pd.DataFrame, objectives: list[str]) -> list[tuple[float, ...]]:
    oriented = [(m, 1.0 if Objective(m).maximize else -1.0) for m in objectives]
    return [tuple(sign * float(r[m]) for m, sign in oriented) for _, r in rows.iterrows()]


def hypervolume_shares(rows: pd.DataFrame, search: SearchRounds) -> list[float]:
    """After each round, the hypervolume of the points so far as a share of all rounds'."""
    points = _measured(rows, search.objectives)
    if not points:
        return [math.nan] * len(search.rounds)
    ref = reference(points)
    final = hypervolume(points, ref)
    return [
        hypervolume(_measured(rows[rows["_round"] <= n], search.objectives), ref) / final
        if final
        else math.nan
        for n in range(1, len(search.rounds) + 1)
    ]


def render_search(pooled: pd.DataFrame, search: SearchRounds) -> str:
    rows = point_rows(pooled, search)
    title = f"{search.method} on {search.dataset}, pair {search.pair}"
    if rows.empty:
        return f"<h3>{esc(title)}</h3><p class='note'>no round's cells are scored yet</p>"
    usable = rows.dropna(subset=search.objectives)
    points = _measured(usable, search.objectives)
    on_front = set(frontier(points))
    shares = hypervolume_shares(usable, search)
    table = [
        "<table><tr><th>round</th><th>points</th><th>hypervolume (share of the final)</th>"
        "<th>best speedup so far</th></tr>"
    ]
    for number, share in enumerate(shares, start=1):
        upto = usable[usable["_round"] <= number]
        best = upto["speedup"].max() if "speedup" in upto and len(upto) else math.nan
        table.append(
            f"<tr><td>{number}</td><td>{len(search.rounds[number - 1])}</td>"
            f"<td>{fmt_num(share)}</td><td>{fmt_num(best)}</td></tr>"
        )
    table.append("</table>")
    return "\n".join(
        [
            f"<h3>{esc(title)}</h3>",
            f"<p>objectives: {esc(', '.join(search.objectives))}"
            + (f"; constraints: {esc(', '.join(search.constraints))}" if search.constraints else "")
            + "</p>",
            "".join(table),
            _targets(usable, search),
            "<div class='figs'>"
            + figure_html(_points_figure(usable, search, points, on_front))
            + figure_html(_hypervolume_figure(shares, title))
            + "</div>",
            _points_table(usable, search, points, on_front),
        ]
    )


def _targets(rows: pd.DataFrame, search: SearchRounds) -> str:
    """The fastest setting keeping RETENTION_TARGET of AR's quality, and the fastest meeting all
    of the search's own constraints."""
    targets = [(f"retention >= {RETENTION_TARGET}", rows["retention"] >= RETENTION_TARGET)]
    if search.constraints:
        ok = pd.Series(True, index=rows.index)
        for text in search.constraints:
            c = parse_constraint("constraints", text)
            ok &= rows[c.metric].map(lambda v, c=c: c.slack({c.metric: v}) <= 0)
        targets.append((" and ".join(search.constraints), ok))
    lines = ["<ul>"]
    for text, ok in targets:
        meeting = rows[ok.fillna(False)].dropna(subset=["speedup"])
        if meeting.empty:
            lines.append(f"<li>fastest with {esc(text)}: no point meets it</li>")
            continue
        best = meeting.loc[meeting["speedup"].idxmax()]
        interval = f"[{fmt_num(best.get('speedup_low'))}, {fmt_num(best.get('speedup_high'))}]"
        lines.append(
            f"<li>fastest with {esc(text)}: <code>{esc(best['_point'])}</code> (round "
            f"{int(best['_round'])}): speedup {fmt_num(best['speedup'])} {interval}, retention "
            f"{fmt_num(best.get('retention'))}</li>"
        )
    lines.append("</ul>")
    return "".join(lines)


def _points_figure(rows, search, points, on_front) -> go.Figure:
    x, y = (
        (search.objectives + ["quality"])[:2]
        if len(search.objectives) < 2
        else (search.objectives[:2])
    )
    fig = go.Figure()
    for number in sorted(rows["_round"].unique()):
        part = rows[rows["_round"] == number]
        fig.add_trace(
            go.Scatter(
                x=part[x].tolist(), y=part[y].tolist(), mode="markers", name=f"round {number}",
                text=part["_point"].tolist(), marker=dict(color=PALETTE[(number - 1) % 10]),
            )
        )  # fmt: skip
    front = [i for i, p in enumerate(points) if p in on_front]
    if front:
        part = rows.iloc[front].sort_values(x)
        fig.add_trace(
            go.Scatter(
                x=part[x].tolist(), y=part[y].tolist(), mode="lines", name="frontier",
                line=dict(dash="dot", color="#444"),
            )
        )  # fmt: skip
    fig.update_layout(**FIGURE_LAYOUT, title="points by round", xaxis_title=x, yaxis_title=y)
    return fig


def _hypervolume_figure(shares: list[float], title: str) -> go.Figure:
    fig = go.Figure(go.Scatter(x=list(range(1, len(shares) + 1)), y=shares, mode="lines+markers"))
    fig.update_layout(
        **FIGURE_LAYOUT,
        title="hypervolume after each round (share of the final)",
        xaxis_title="round",
        yaxis_title="share",
    )
    return fig


def _points_table(rows, search, points, on_front) -> str:
    columns = list(dict.fromkeys(["speedup", *search.objectives, "retention", "tau"]))
    head = "".join(f"<th>{esc(c)}</th>" for c in ["round", "setting", *columns, "frontier"])
    body = []
    for i, (_, r) in enumerate(rows.iterrows()):
        values = "".join(f"<td>{fmt_num(r.get(c))}</td>" for c in columns)
        mark = "◆" if points[i] in on_front else ""
        body.append(
            f"<tr><td>{int(r['_round'])}</td><td><code>{esc(r['_point'])}</code></td>"
            f"{values}<td>{mark}</td></tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"
