"""Loose verification (LVSpec's Figure 7): quality retention against speedup, per (dataset, pair,
temperature), with the Pareto frontier highlighted, and the retention table under it; one point
and row per method and hp with its seeds pooled, each retention with its 95% interval (over the
seeds; with one seed, the cell's bootstrap interval over its samples).

Shown only when some cell verifies with a loose rule (`methods.components.loose_rules`). The
retention axis is the LLM judge's (judge_retention) where the dataset is judged, else the task
metric's; lossless cells sit at the retention they measure (1 for greedy SD, up to sampling noise
otherwise), so the frontier starts from exact SD.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mmspec.methods.components import loose_rules
from mmspec.report.cells import is_ar, sort_cells
from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import dataset_note, esc, fmt_num, heading, is_missing, label_html
from mmspec.report.pareto import front_rows, front_trace

ANCHOR = "loose-verification"
RETENTION = "_retention"  # the plotted retention column (retention_axis), and its interval
RETENTION_LOW, RETENTION_HIGH = "_retention_low", "_retention_high"
TITLE = "Loose verification: retention vs speedup"
CAPTION = (
    "Each method and hp's quality retention (a cell's mean quality / its AR cell's on the same "
    "samples: the LLM judge's scores where the dataset is judged, else the task metric's) "
    "against its speedup, both means over its seeds, one colour per acceptance rule, as in "
    "LVSpec's Figure 7. The dotted line and diamonds mark the Pareto frontier: no other point "
    "is both at least as fast and retains at least as much. A loose rule accepts some "
    "mismatched draft tokens (relaxed share: of the accepted draft tokens); lossless rules sit "
    "at the retention of exact decoding. The bars and the bracketed ranges are each "
    "retention's 95% interval: over the seeds (a t interval) where there are several, else the "
    "cell's bootstrap interval, resampling the samples with their AR answers paired; two "
    "points whose intervals overlap are within noise of each other. judge failures are "
    "judgements that failed after retries (summed over the seeds): counted, never scored."
)
# the table's columns: (cells column, header, integer); a retention shows its interval
TABLE_COLUMNS = [
    ("n_seeds", "seeds", True),
    ("tau", "τ", False),
    ("speedup", "speedup", False),
    ("relaxed_share", "relaxed share", False),
    ("retention", "retention (metric) [95% interval]", False),
    ("judge_retention", "retention (judge) [95% interval]", False),
    ("judge_score", "judge score (0-5)", False),
    ("judge_failures", "judge failures", True),
]


def render(cells: pd.DataFrame, notes: dict[str, str] | None = None) -> str:
    """The section of the seeds-pooled rows `cells` (`pooled.pool_seeds`), or "" when none
    verifies loosely; `notes` (dataset -> text) a note under each of a dataset's headings."""
    loose = loose_rules()
    if "acceptance" not in cells or not cells["acceptance"].isin(loose).any():
        return ""
    parts = [heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>"]
    for key, group in cells.groupby(["dataset", "pair", "temperature"], sort=True):
        if not group["acceptance"].isin(loose).any():
            continue
        title = f"{key[0]} · {key[1]} · T={fmt_num(key[2])}"
        group = group.assign(**retention_axis(group))
        points = group[~group["method"].map(is_ar)].dropna(subset=["speedup", RETENTION])
        front = front_rows(points, RETENTION)
        parts.append(f"<h3>{esc(title)}</h3>{dataset_note(notes or {}, key[0])}")
        if not points.empty:
            fig = figure_html(retention_figure(points, front, title))
            parts.append(f"<div class='figs'>{fig}</div>")
        parts.append(retention_table(group, front))
    return "\n".join(parts)


def retention_axis(cells: pd.DataFrame) -> dict[str, pd.Series]:
    """The judge's retention and its interval where any cell of the group has one, else the
    task metric's, as the columns RETENTION, RETENTION_LOW and RETENTION_HIGH."""
    judged = "judge_retention" in cells and cells["judge_retention"].notna().any()
    name = "judge_retention" if judged else "retention"
    missing = pd.Series(float("nan"), index=cells.index)
    return {
        RETENTION: cells[name],
        RETENTION_LOW: cells.get(f"{name}_low", missing),
        RETENTION_HIGH: cells.get(f"{name}_high", missing),
    }


def retention_figure(points: pd.DataFrame, front: pd.DataFrame, title: str) -> go.Figure:
    """Each drafting cell's (speedup, retention), a colour per rule, with the frontier."""
    fig = go.Figure()
    for i, (rule, group) in enumerate(points.groupby("acceptance", sort=True)):
        fig.add_trace(
            go.Scatter(
                x=group["speedup"],
                y=group[RETENTION],
                mode="markers",
                name=esc(rule),
                marker=dict(color=PALETTE[i % len(PALETTE)], size=9),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=group[RETENTION_HIGH] - group[RETENTION],
                    arrayminus=group[RETENTION] - group[RETENTION_LOW],
                    thickness=1,
                    width=3,
                ),
                hovertext=[_hover(row) for _, row in group.iterrows()],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    fig.add_trace(front_trace(front, RETENTION).update(name="Pareto frontier"))
    fig.update_layout(
        title=esc(title),
        xaxis_title="speedup (×)",
        yaxis_title="quality retention",
        **FIGURE_LAYOUT,
    )
    return fig


def _hover(row: pd.Series) -> str:
    return (
        f"{label_html(row['label'])} ({esc(row['method'])})<br>hp: {esc(row['hp'])}"
        f"<br>speedup {fmt_num(row['speedup'])} · retention {fmt_num(row[RETENTION])}"
        f" [{fmt_num(row[RETENTION_LOW])}, {fmt_num(row[RETENTION_HIGH])}]"
        f"<br>tau {fmt_num(row['tau'])} · relaxed {fmt_num(row['relaxed_share'])}"
        f"<br>seeds: {fmt_num(row.get('n_seeds'), True)}"
    )


def retention_table(cells: pd.DataFrame, front: pd.DataFrame) -> str:
    """One row per pooled row: its rule, seeds, speed, relaxed share, both retentions and judge
    failures; a ◆ marks the frontier (`front`)."""
    front_keys = set(zip(front["method"], front["hp"], strict=True))
    head = "".join(f"<th>{esc(h)}</th>" for _, h, _ in TABLE_COLUMNS)
    rows = []
    for _, row in sort_cells(cells).iterrows():
        mark = "◆ " if (row["method"], row["hp"]) in front_keys else ""
        values = "".join(f"<td class='num'>{_value(row, c, i)}</td>" for c, _, i in TABLE_COLUMNS)
        rows.append(
            f"<tr><td>{mark}{label_html(row['label'])}</td><td>{esc(row['acceptance'])}</td>"
            f"<td class='note'>{esc(row['hp'])}</td>{values}</tr>"
        )
    return (
        "<div class='scroll'><table class='retention'><thead><tr><th>cell</th><th>rule</th>"
        f"<th>hp</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _value(row: pd.Series, column: str, integer: bool) -> str:
    """The cell's value; a retention with its interval ("0.98 [0.96, 0.99]") where it has one."""
    value = fmt_num(row.get(column), integer)
    low, high = row.get(f"{column}_low"), row.get(f"{column}_high")
    if not column.endswith("retention") or is_missing(low) or is_missing(high):
        return value
    return f"{value} <span class='note'>[{fmt_num(low)}, {fmt_num(high)}]</span>"
