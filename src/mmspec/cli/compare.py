"""`mmspec compare-outputs A B`: do two runs' cells decode the same tokens?

Reads the generate outputs of two results folders (two machines, two versions of mmspec, a rerun)
and compares every cell both have, sample-turn by sample-turn: the output token ids, and how many
tokens each verification step drafted and accepted (what a change to the engine would move).
Timings are not compared. A cell only one folder has is listed, not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mmspec.storage import integrity

COMPARED = ("output_ids", "step_drafted", "step_accepted")
KEY = ("sample_id", "turn")


@dataclass
class Comparison:
    same: list[str] = field(default_factory=list)
    different: list[tuple[str, str]] = field(default_factory=list)  # (cell, the first difference)
    only_first: list[str] = field(default_factory=list)
    only_second: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not (self.different or self.only_first or self.only_second)


def _cells(results: Path) -> dict[str, Path]:
    root = results / "generate"
    if not root.is_dir():
        raise FileNotFoundError(f"{results}: no generate outputs here ({root} is missing)")
    return {str(p.parent.relative_to(root)): p for p in root.rglob("samples.parquet")}


def _rows(path: Path) -> dict[tuple, dict]:
    try:
        table = pq.read_table(path, columns=[*KEY, *COMPARED], page_checksum_verification=True)
    except (pa.ArrowException, OSError) as error:
        if getattr(error, "errno", None) is not None:
            raise
        # set aside as every reader of a stage's output does, so that the sweep's line rebuilds it
        aside = integrity.set_aside(path)
        raise ValueError(
            f"{path}: corrupt or truncated Parquet file ({' '.join(str(error).split())}); moved "
            f"aside to {aside.name}: the snakemake line of its sweep rebuilds it"
        ) from None
    return {tuple(r[k] for k in KEY): r for r in table.to_pylist()}


def first_difference(a: Path, b: Path) -> str | None:
    """Where two cells' outputs first differ (None: nowhere)."""
    rows_a, rows_b = _rows(a), _rows(b)
    if rows_a.keys() != rows_b.keys():
        return f"sample-turns differ: {sorted(rows_a.keys() ^ rows_b.keys())[:3]}"
    for key in sorted(rows_a):
        for column in COMPARED:
            if rows_a[key][column] != rows_b[key][column]:
                return f"sample {key[0]} turn {key[1]}: {column}"
    return None


def compare(first: str | Path, second: str | Path) -> Comparison:
    cells_a, cells_b = _cells(Path(first)), _cells(Path(second))
    out = Comparison(
        only_first=sorted(cells_a.keys() - cells_b.keys()),
        only_second=sorted(cells_b.keys() - cells_a.keys()),
    )
    for cell in sorted(cells_a.keys() & cells_b.keys()):
        difference = first_difference(cells_a[cell], cells_b[cell])
        if difference is None:
            out.same.append(cell)
        else:
            out.different.append((cell, difference))
    return out


def render(result: Comparison) -> str:
    lines = [
        f"{len(result.same)} cells decode the same tokens, {len(result.different)} differ; "
        f"{len(result.only_first)} only in the first folder, {len(result.only_second)} only in "
        "the second"
    ]
    lines += [f"  differs: {cell}: {where}" for cell, where in result.different]
    lines += [f"  only in the first: {cell}" for cell in result.only_first]
    lines += [f"  only in the second: {cell}" for cell in result.only_second]
    return "\n".join(lines)
