"""Image generation (LANTERN's Figure 5 and its samples): FID against mean accepted length, one
curve per method and k with a marker per delta, and the first generated images of each; one point
per method and hp with its seeds pooled (`pooled.pool_seeds`), the images its first seed's.

Shown only when some cell generated images (its `fid` is set). Thumbnails are PNGs inlined as
data URIs, so the page stays self-contained.
"""

from __future__ import annotations

import base64
import json

import pandas as pd
import plotly.graph_objects as go

from mmspec.report.cells import sort_cells
from mmspec.report.figures import FIGURE_LAYOUT, PALETTE, figure_html
from mmspec.report.formatting import esc, fmt_num, heading, label_html

ANCHOR = "image-generation"
TITLE = "Image generation: FID vs accepted length"
CAPTION = (
    "Each method and hp's FID (its generated images against the dataset's reference images, in "
    "the feature network's space; lower is better) against its mean accepted length τ, both "
    "means over its seeds; the images are its first seed's. Points of one "
    "method and neighbourhood size k form a curve over the relaxation δ (a marker per δ, "
    "labelled), as in LANTERN's Figure 5; the dotted line is the AR cell's FID. Lossless methods "
    "draw the same images as AR (greedy) or from the same distribution (sampling), so their FID "
    "differs from AR's only by sampling noise of the finite image set. quality in the tables "
    "above is the CLIP score of each image with its caption (100 × cosine, at least 0); "
    "fid_retention = AR FID / FID."
)
THUMBNAIL_PX = 48  # shown size of each thumbnail; pixels are scaled without smoothing


def render(cells: pd.DataFrame, colors: dict[str, str]) -> str:
    """The section of the seeds-pooled rows `cells`, or "" when none generated images."""
    images = cells[cells["fid"].notna()] if "fid" in cells else cells.iloc[:0]
    if images.empty:
        return ""
    parts = [heading(ANCHOR, TITLE), f"<p class='caption'>{CAPTION}</p>"]
    for (dataset, pair, temperature), group in images.groupby(
        ["dataset", "pair", "temperature"], sort=True
    ):
        title = f"{dataset} · {pair} · T={fmt_num(temperature)}"
        parts.append(f"<h3>{esc(title)}</h3>")
        parts.append(f"<div class='figs'>{figure_html(fid_figure(group, title, colors))}</div>")
        parts.append(thumbnails_html(group))
    return "\n".join(parts)


def _relaxation(acceptance: str | None, hparams: str) -> tuple[object, object]:
    """(k, delta) of a LANTERN cell (its rule's values, from its hyperparameters' JSON);
    (None, None) for other rules."""
    if acceptance != "lantern":
        return None, None
    values = json.loads(hparams)
    return values["lantern_k"], values["lantern_delta"]


def fid_figure(cells: pd.DataFrame, title: str, colors: dict[str, str]) -> go.Figure:
    """FID vs tau: a line per (method, k) through its deltas; other cells as single markers."""
    relaxations = [
        _relaxation(a, h) for a, h in zip(cells["acceptance"], cells["hparams"], strict=True)
    ]
    cells = cells.assign(_k=[k for k, _ in relaxations], _delta=[d for _, d in relaxations])
    fig = go.Figure()
    ar = cells[cells["method"] == "ar"]
    curves = 0
    for (method, k), group in cells.groupby(["method", "_k"], sort=True, dropna=False):
        if method == "ar":
            continue
        group = group.sort_values("_delta")
        relaxed = not pd.isna(k)
        name = f"{method} k={int(k)}" if relaxed else str(method)
        # curves of one method differ in k: each its own colour, so they read apart
        color = PALETTE[curves % len(PALETTE)] if relaxed else colors.get(method)
        curves += relaxed
        fig.add_trace(
            go.Scatter(
                x=group["tau"],
                y=group["fid"],
                mode="lines+markers+text" if relaxed else "markers",
                name=esc(name),
                text=[f"δ{d:g}" for d in group["_delta"]] if relaxed else None,
                textposition="top center",
                textfont=dict(size=9),
                line=dict(color=color),
                marker=dict(color=color, size=9),
                hovertext=[_hover(row) for _, row in group.iterrows()],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    if not ar.empty:
        fid = float(ar["fid"].mean())
        fig.add_hline(y=fid, line_dash="dot", annotation_text=f"AR FID {fid:.2f}")
        fig.add_trace(
            go.Scatter(
                x=ar["tau"],
                y=ar["fid"],
                mode="markers",
                name="AR",
                marker=dict(color=colors.get("ar"), size=9, symbol="diamond"),
            )
        )
    fig.update_layout(
        title=esc(title),
        xaxis_title="mean accepted length τ",
        yaxis_title="FID (lower is better)",
        **FIGURE_LAYOUT,
    )
    return fig


def _hover(row: pd.Series) -> str:
    return (
        f"{label_html(row['label'])} ({esc(row['method'])})<br>hp: {esc(row['hp'])}"
        f"<br>tau {fmt_num(row['tau'])} · FID {fmt_num(row['fid'])}"
        f" · CLIP {fmt_num(row['quality'])} · speedup {fmt_num(row['speedup'])}"
        f" · relaxed {fmt_num(row.get('relaxed_share'))}"
        f"<br>seeds: {fmt_num(row.get('n_seeds'), True)}"
    )


def thumbnails_html(cells: pd.DataFrame) -> str:
    """A row of each pooled row's first generated images (the same prompts in every row)."""
    rows = []
    for _, row in sort_cells(cells).iterrows():
        pngs = row["thumbnails"] if row["thumbnails"] is not None else []
        imgs = "".join(
            f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}' "
            f"width='{THUMBNAIL_PX}' height='{THUMBNAIL_PX}' alt='generated image {i + 1}'>"
            for i, png in enumerate(pngs)
        )
        name = f"{label_html(row['label'])} <span class='note'>{esc(row['hp'])}</span>"
        rows.append(f"<tr><td>{name}</td><td class='thumbs'>{imgs}</td></tr>")
    return (
        "<div class='scroll'><table><thead><tr><th>cell</th><th>first images (same prompts in "
        f"every row)</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
