"""Data values as page text: HTML-escaped strings, numbers at display precision, best-value marks.

Every string that comes from the data goes through `esc` (or `label_html`), including those that
plotly renders (hover text, legend names, titles), because plotly interprets a subset of HTML.
"""

from __future__ import annotations

import html
import math
import re

import pandas as pd

MISSING = "–"


def is_missing(value: object) -> bool:
    """True for None, NaN and pandas' missing markers (but not for strings or lists)."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def esc(value: object) -> str:
    """HTML-escaped text of a data value; missing values become a dash.

    A double quote becomes `&#34;`, not `&quot;`: plotly decodes numeric references in the text
    it draws, but of the named ones only a few (not `quot`), so it would show "&quot;" verbatim.
    """
    if is_missing(value):
        return MISSING
    return html.escape(str(value)).replace("&quot;", "&#34;")


def label_html(text: object) -> str:
    """An escaped display name, with the paper's "^MT" suffixes as superscripts."""
    return re.sub(r"\^(\w+)", r"<sup>\1</sup>", esc(text))


def fmt_num(value: object, integer: bool = False) -> str:
    """A number with 2-3 significant decimals (integers as such); missing values as a dash."""
    if is_missing(value):
        return MISSING
    x = float(value)
    if integer or math.isinf(x):
        return str(int(x)) if not math.isinf(x) else str(x)
    magnitude = abs(x)
    if magnitude >= 100:
        return f"{x:.0f}"
    if magnitude >= 10:
        return f"{x:.1f}"
    if magnitude >= 1:
        return f"{x:.2f}"
    return f"{x:#.3g}"


def rank_marks(values: list[float]) -> list[str]:
    """Per value: "best", "second" or "" — ranks by the displayed number, so visible ties share."""
    shown = [None if is_missing(v) else float(fmt_num(v)) for v in values]
    distinct = sorted({v for v in shown if v is not None}, reverse=True)
    marks = {v: mark for v, mark in zip(distinct, ("best", "second"), strict=False)}
    return [marks.get(v, "") if v is not None else "" for v in shown]


def heading(anchor: str, title: str) -> str:
    """A section heading the table of contents links to; `title` is HTML already."""
    return f"<h2 id='{anchor}'>{title}</h2>"


def dataset_note(notes: dict[str, str], dataset: str) -> str:
    """The dataset's note as a paragraph, or "" when its entry has none."""
    note = notes.get(dataset, "").strip()
    return f"<p class='note'><b>Note on {esc(dataset)}:</b> {esc(note)}</p>" if note else ""
