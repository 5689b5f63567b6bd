"""Stage report: results/summary/cells.parquet -> reports/index.html."""

from __future__ import annotations


def run(cells: str, out: str) -> None:
    from mmspec.report.html import write_report

    write_report(cells, out)
