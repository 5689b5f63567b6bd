"""Stage report: the HTML report of a sweep (mmspec.report.page)."""

from __future__ import annotations


def run(
    cells: str,
    out: str,
    blocks: str | None = None,
    heads: list[str] | None = None,
    claims: str | None = None,
) -> None:
    from mmspec.report.page import write_report

    write_report(cells, out, blocks, heads, claims)
