"""The method table of a (dataset, pair) section: one row per cell, every metric of the cell.

The columns that compare a cell's output with AR's are red on a greedy cell of a lossless rule
that diverged (an engine bug), and grey on a lossy rule, whose divergence is expected. In the
browser the table sorts by a column when its header is clicked and filters its rows by the text
typed above it (`SORT_FILTER_JS`, inlined once in the page head; it reads cell text only, never
writes HTML).
"""

from __future__ import annotations

import pandas as pd

from mmspec.report.cells import is_ar_row, is_lossy_rule, lossless_bug
from mmspec.report.formatting import esc, fmt_num, is_missing, label_html

# Columns of the table, in display order.
TABLE_COLUMNS = [
    "label",
    "method",
    "hp",
    "views",
    "weights",
    "seed",
    "n_samples",
    "steps",
    "new_tokens",
    "tau",
    "accepted_mean",
    "speedup",
    "speedup_low",
    "speedup_high",
    "speedup_eq1",
    "speedup_eq1_verify",
    "latency_ratio",
    "verify_cost",
    "lossless_rate",
    "first_divergence_mean",
    "quality",
    "retention",
    "retention_low",
    "retention_high",
    "tokens_per_s",
    "prefill_s",
    "caption_s",
    "draft_visual_share",
]
# Shown after `retention` in the sections of image generation (cells with an FID).
IMAGE_COLUMNS = ["fid", "fid_retention"]
# Shown after `retention` where the dataset is judged (an LLM judge scored the answers).
JUDGE_COLUMNS = [
    "judge_score",
    "judge_retention",
    "judge_retention_low",
    "judge_retention_high",
    "judge_failures",
]
# Shown after accepted_mean where a cell verifies loosely (some accepted tokens mismatched).
RELAXED_COLUMNS = ["relaxed_share"]
TEXT_COLUMNS = {"label", "method", "hp", "views", "weights"}
INT_COLUMNS = {"seed", "n_samples", "steps", "new_tokens", "judge_failures"}
# The columns that compare the cell's output with AR's.
DIVERGENCE_COLUMNS = ["lossless_rate", "first_divergence_mean"]
LOSSY_NOTE = "lossy rule: divergence is expected, see retention"
NOISE_NOTE = "within timing noise of AR: the speedup's 95% interval contains 1"

# Sorting and filtering of every `table.cells`: a click on a header sorts by that column, a second
# click reverses; numbers sort as numbers, a missing value ("–") last either way. The filter keeps
# the rows whose text contains what is typed (case-insensitive).
SORT_FILTER_JS = """
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("div.cells-table").forEach(function (box) {
    var table = box.querySelector("table.cells"), body = table.tBodies[0];
    var filter = box.querySelector("input.filter");
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    function key(row, i) {
      var td = row.cells[i], text = td.textContent.trim();
      if (!td.classList.contains("num")) return text;
      var x = parseFloat(text);
      return isNaN(x) ? null : x;
    }
    heads.forEach(function (th, i) {
      th.title = "click to sort";
      th.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a, i), y = key(b, i);
          if (x === null || y === null) return (x === null) - (y === null);
          var c = typeof x === "number" ? x - y : x.localeCompare(y, undefined, {numeric: true});
          return up ? c : -c;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
    filter.addEventListener("input", function () {
      var q = filter.value.trim().toLowerCase();
      Array.prototype.forEach.call(body.rows, function (row) {
        row.hidden = q !== "" && row.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  });
});
"""


def render(cells: pd.DataFrame) -> str:
    """One row per cell; the best measured speedup in bold, non-lossless greedy cells in red."""
    best = cells["speedup"].max(skipna=True)
    columns = table_columns(cells)
    head = "".join(f"<th>{c}</th>" for c in columns)
    rows, bugs, lossy, noise = [], [], [], []
    for _, row in cells.iterrows():
        divergence = divergence_style(row)
        classes = []
        if not is_missing(best) and row["speedup"] == best:
            classes.append("best")
        if divergence == "bug":
            classes.append("bug")
            bugs.append(cell_name(row))
        elif divergence == "lossy":
            lossy.append(cell_name(row))
        if within_noise(row) and not is_ar_row(row):
            noise.append(cell_name(row))
        cls = f" class='{' '.join(classes)}'" if classes else ""
        tds = "".join(table_cell(row, column, divergence) for column in columns)
        rows.append(f"<tr{cls}>{tds}</tr>")
    table = (
        f"<table class='cells'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    box = (
        "<div class='cells-table'><input type='search' class='filter' "
        "placeholder='filter rows' aria-label='filter the rows of this table'>"
        f"<div class='scroll'>{table}</div></div>"
    )
    return f"{box}{bug_note(bugs)}{lossy_note(lossy)}{noise_note(noise)}"


def table_columns(cells: pd.DataFrame) -> list[str]:
    """TABLE_COLUMNS, with the image metrics or the judge's after retention when the cells have
    them, and the relaxed share after accepted_mean when some cell verified loosely."""

    def has(column: str) -> bool:
        return column in cells and cells[column].notna().any()

    columns = list(TABLE_COLUMNS)
    extra = [*(IMAGE_COLUMNS if has("fid") else []), *(JUDGE_COLUMNS if has("judge_score") else [])]
    at = columns.index("retention") + 1
    columns[at:at] = extra
    if has("relaxed_share") and (cells["relaxed_share"].fillna(0) > 0).any():
        at = columns.index("accepted_mean") + 1
        columns[at:at] = RELAXED_COLUMNS
    return columns


def within_noise(row: pd.Series) -> bool:
    """Whether the cell's speedup interval contains 1 (no measurable difference from AR)."""
    low, high = row.get("speedup_low"), row.get("speedup_high")
    return not is_missing(low) and not is_missing(high) and low <= 1.0 <= high


def noise_note(cells: list[str]) -> str:
    """The legend of the grey speedups: methods not measurably faster or slower than AR."""
    if not cells:
        return ""
    return (
        f"<p class='note'>Speedup {NOISE_NOTE}, so not measurably different from AR (in grey): "
        f"{'; '.join(cells)}. Two methods differ beyond noise where their intervals are disjoint."
        "</p>"
    )


def divergence_style(row: pd.Series) -> str:
    """How the divergence columns of a cell are shown: "bug", "lossy" or "" (plain)."""
    if lossless_bug(row):
        return "bug"
    return "lossy" if is_lossy_rule(row) else ""


def cell_name(row: pd.Series) -> str:
    """A cell as the notes under the table name it: label, hp and seed."""
    return f"{label_html(row['label'])} {esc(row['hp'])} seed {fmt_num(row['seed'], True)}"


def bug_note(bugs: list[str]) -> str:
    """The alert under the table naming its greedy cells that diverged from AR; "" if none."""
    if not bugs:
        return ""
    return (
        "<p class='alert'>⚠ lossless_rate &lt; 1 on greedy cell(s): "
        f"{'; '.join(bugs)}. Greedy decoding must match AR token for token — this is a bug.</p>"
    )


def lossy_note(lossy: list[str]) -> str:
    """The legend of the grey divergence columns of the table's lossy-rule cells; "" if none."""
    if not lossy:
        return ""
    columns = " and ".join(DIVERGENCE_COLUMNS)
    return f"<p class='note'>{LOSSY_NOTE} ({columns} in grey: {'; '.join(lossy)}).</p>"


def table_cell(row: pd.Series, column: str, divergence: str) -> str:
    """One <td>; the hp cell carries the full hyperparameter JSON as a tooltip, the divergence
    columns of a lossy-rule cell the lossy note."""
    value = row[column]
    if column == "label":
        return f"<td>{label_html(value)}</td>"
    if column in TEXT_COLUMNS:
        title = f" title='{esc(row['hparams'])}'" if column == "hp" else ""
        return f"<td{title}>{esc(value)}</td>"
    text = fmt_num(value, integer=column in INT_COLUMNS)
    if column in DIVERGENCE_COLUMNS and divergence == "bug":
        return f"<td class='num bug-cell'>{text}</td>"
    if column in DIVERGENCE_COLUMNS and divergence == "lossy":
        return f"<td class='num lossy-cell' title='{LOSSY_NOTE}'>{text}</td>"
    if column == "speedup" and within_noise(row):
        return f"<td class='num noise-cell' title='{NOISE_NOTE}'>{text}</td>"
    return f"<td class='num'>{text}</td>"
