"""The method table of a (dataset, pair) section: one row per method and hp with its seeds pooled
(`pooled.pool_seeds`), each seed's cell one click away under it; every metric of the cell.

The columns that compare a cell's output with AR's are red on a greedy cell of a lossless rule
that diverged (an engine bug), and grey on a lossy rule, whose divergence is expected. The rows
are a `datatable`: paged, sorted by a header click, filtered by the text typed above.
"""

from __future__ import annotations

import math

import pandas as pd

from mmspec.report import datatable
from mmspec.report.cells import is_ar_row, is_lossy_rule, lossless_bug
from mmspec.report.formatting import MISSING, esc, fmt_num, is_missing, label_html
from mmspec.report.pooled import INTERVAL_METRICS, SUMMED, interval_title

# Columns of the table, in display order.
TABLE_COLUMNS = [
    "label",
    "method",
    "hp",
    "views",
    "weights",
    "seeds",
    "n_samples",
    "steps",
    "new_tokens",
    "tau",
    "accepted_mean",
    "speedup",
    "speedup_low",
    "speedup_high",
    "ar_speed_ratio",
    "speedup_eq1",
    "speedup_eq1_verify",
    "latency_ratio",
    "verify_cost",
    "lossless_rate",
    "first_divergence_mean",
    "near_tie_divergences",
    "real_divergences",
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
INT_COLUMNS = {"seeds", *SUMMED}  # counts: the seeds pooled and the sums over them
# The columns that compare the cell's output with AR's.
DIVERGENCE_COLUMNS = [
    "lossless_rate",
    "first_divergence_mean",
    "near_tie_divergences",
    "real_divergences",
]
LOSSY_NOTE = "lossy rule: divergence is expected, see retention"
NOISE_NOTE = "within timing noise of AR: the speedup's 95% interval contains 1"


def render(cells: pd.DataFrame, pooled: pd.DataFrame) -> str:
    """The table of one section's `cells` and their `pooled` rows: the best pooled speedup in
    bold, rows of non-lossless greedy cells in red, with the notes that name them."""
    # the best speedup of the sound rows: a greedy lossless cell with real divergences is a bug
    sound = pooled[[not lossless_bug(row) for row in pooled.to_dict("records")]]
    best = sound["speedup"].max(skipna=True) if len(sound) else math.nan
    columns = table_columns(cells)
    by_index = cells.to_dict("index")  # rows as dicts: a pandas row per cell is slow at scale
    rows, bugs, lossy, noise = [], [], [], []
    for pooled_row in pooled.to_dict("records"):
        divergence = divergence_style(pooled_row)
        classes = []
        if not is_missing(best) and pooled_row["speedup"] == best and not lossless_bug(pooled_row):
            classes.append("best")
        if divergence == "bug":
            classes.append("bug")
        elif divergence == "lossy":
            lossy.append(cell_name(pooled_row))
        if within_noise(pooled_row) and not is_ar_row(pooled_row):
            noise.append(cell_name(pooled_row))
        seeds = [by_index[i] for i in pooled_row["_members"]]
        bugs += [cell_name(seed) for seed in seeds if lossless_bug(seed)]
        subs = [seed_row(seed, columns) for seed in seeds] if len(seeds) > 1 else []
        cells_of_row = [table_cell(pooled_row, c, divergence) for c in columns]
        rows.append(datatable.row(cells_of_row, " ".join(classes), subs))
    numeric = {c for c in columns if c not in TEXT_COLUMNS}
    table = datatable.render(columns, rows, numeric, labels={"label"})
    return f"{table}{bug_note(bugs)}{lossy_note(lossy)}{noise_note(noise)}"


def seed_row(seed: dict, columns: list[str]) -> dict:
    """A seed's cell under its pooled row: its numbers, and its seed in place of the names
    (they are the pooled row's, just above)."""
    divergence = divergence_style(seed)
    shown = [
        "" if c in TEXT_COLUMNS else table_cell(seed, c, divergence, in_pool=True) for c in columns
    ]
    return datatable.row(shown, "bug" if divergence == "bug" else "")


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


def within_noise(row: pd.Series | dict) -> bool:
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


def divergence_style(row: pd.Series | dict) -> str:
    """How the divergence columns of a cell are shown: "bug", "lossy" or "" (plain)."""
    if lossless_bug(row):
        return "bug"
    return "lossy" if is_lossy_rule(row) else ""


def cell_name(row: pd.Series | dict) -> str:
    """A cell or pooled row as the notes under the table name it: label, hp and seed (or the
    number of seeds pooled)."""
    name = f"{label_html(row['label'])} {esc(row['hp'])}"
    n_seeds = row.get("n_seeds", 1)
    if not is_missing(n_seeds) and n_seeds > 1:
        return f"{name} ({int(n_seeds)} seeds)"
    return f"{name} seed {fmt_num(row['seed'], True)}"


def bug_note(bugs: list[str]) -> str:
    """The alert under the table naming its greedy cells that diverged from AR; "" if none."""
    if not bugs:
        return ""
    return (
        "<p class='alert'>⚠ real divergences from AR on greedy cell(s) of a lossless rule: "
        f"{'; '.join(bugs)}. Greedy decoding must match AR token for token, up to rounding "
        "near-ties — this is a bug.</p>"
    )


def lossy_note(lossy: list[str]) -> str:
    """The legend of the grey divergence columns of the table's lossy-rule cells; "" if none."""
    if not lossy:
        return ""
    columns = " and ".join(DIVERGENCE_COLUMNS)
    return f"<p class='note'>{LOSSY_NOTE} ({columns} in grey: {'; '.join(lossy)}).</p>"


def table_cell(row: pd.Series | dict, column: str, divergence: str, in_pool: bool = False):
    """One cell of the table (`datatable.cell`) of a pooled row, or of a seed's cell under it
    (`in_pool`). The hp carries the full hyperparameter JSON as a tooltip, a pooled mean its
    interval over seeds, the divergence columns of a lossy-rule cell the lossy note."""
    if column in TEXT_COLUMNS:
        value = row[column]
        title = str(row["hparams"]) if column == "hp" and not in_pool else ""
        return datatable.cell(MISSING if is_missing(value) else str(value), title=title)
    if column == "seeds":
        if in_pool:
            return f"seed {fmt_num(row['seed'], True)}"
        return datatable.cell(str(int(row["n_seeds"])), title=seeds_title(row["seeds"]))
    text = fmt_num(row[column], integer=column in INT_COLUMNS)
    if column in DIVERGENCE_COLUMNS and divergence == "bug":
        return datatable.cell(text, "bug-cell")
    if column in DIVERGENCE_COLUMNS and divergence == "lossy":
        return datatable.cell(text, "lossy-cell", LOSSY_NOTE)
    if column == "speedup" and within_noise(row):
        return datatable.cell(text, "noise-cell", NOISE_NOTE)
    if column in INTERVAL_METRICS and not in_pool:
        return datatable.cell(text, title=interval_title(row, column))
    return text


def seeds_title(seeds: list) -> str:
    """The seeds of a pooled row, listed (the first and last few of many)."""
    names = [str(int(s)) for s in seeds]
    shown = names if len(names) <= 8 else [*names[:4], "…", *names[-2:]]
    return f"seed{'s' if len(names) > 1 else ''} {', '.join(shown)}"
