"""What loose verification changed in the toy video descriptions: each cell's outputs against
its AR cell's, word by word (difflib over the words of each description), split into

- visual substitutions: a word put in place of one (same position in an equal-length run) where
  either word states visual content (`toyworld.VISUAL_WORDS`: a colour, shape, corner, count,
  moves / stays), the errors that cost the rubric;
- filler substitutions: the same with neither word visual (the house styles' synonyms);
- other edits: insertions, deletions and unequal replacements; `visual` counts those touching a
  visual word (a motion's destination added or lost, a sentence about an object skipped).

It reads a finished run of the toy_lvspec preset (results/generate, and each cell's tau from
results/summary/cells.parquet); every cell of the pair on the dataset is listed:

    python analysis/lvspec/diffs.py --dataset toy_vdesc --pair toy_vdesc_pair
"""

from __future__ import annotations

import argparse
import difflib
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from mmspec.toy import world as toyworld


def edits(reference: str, output: str) -> Counter:
    """The edit counts (keys as in the module's docstring) turning `reference` into `output`."""
    a, b = reference.split(), output.split()
    counts = Counter()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and i2 - i1 == j2 - j1:
            for x, y in zip(a[i1:i2], b[j1:j2], strict=True):
                visual = x in toyworld.VISUAL_WORDS or y in toyworld.VISUAL_WORDS
                counts["visual substitutions" if visual else "filler substitutions"] += 1
        else:
            counts["other edits"] += 1
            if any(w in toyworld.VISUAL_WORDS for w in a[i1:i2] + b[j1:j2]):
                counts["other edits, visual"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", type=Path)
    parser.add_argument("--dataset", default="toy_vdesc")
    parser.add_argument("--pair", default="toy_vdesc_pair")
    args = parser.parse_args()
    folder = args.results / "generate" / f"dataset={args.dataset}" / f"pair={args.pair}"
    reference_file = folder / "method=ar" / "hp=default" / "seed=0" / "samples.parquet"
    if not reference_file.exists():
        raise SystemExit(f"{reference_file}: no AR cell; run the preset first")
    reference = {
        r["sample_id"]: r["output_text"]
        for r in pq.read_table(reference_file, columns=["sample_id", "output_text"]).to_pylist()
    }
    cells = pq.read_table(args.results / "summary" / "cells.parquet").to_pylist()
    tau = {
        (c["method"], c["hp"]): c["tau"]
        for c in cells
        if c["dataset"] == args.dataset and c["pair"] == args.pair and c["seed"] == 0
    }
    keys = ["visual substitutions", "filler substitutions", "other edits", "other edits, visual"]
    print(f"{'method':14} {'hp':40} {'tau':>5} " + " ".join(f"{k:>22}" for k in keys))
    for path in sorted(folder.glob("method=*/hp=*/seed=0/samples.parquet")):
        method = path.parts[-4].removeprefix("method=")
        hp = path.parts[-3].removeprefix("hp=")
        if method == "ar":
            continue
        total = Counter()
        for row in pq.read_table(path, columns=["sample_id", "output_text"]).to_pylist():
            if row["sample_id"] not in reference:
                raise SystemExit(f"{path}: sample {row['sample_id']} has no AR output")
            total += edits(reference[row["sample_id"]], row["output_text"])
        cell_tau = f"{tau[(method, hp)]:5.2f}" if (method, hp) in tau else "    -"
        print(f"{method:14} {hp:40} {cell_tau} " + " ".join(f"{total[k]:22d}" for k in keys))


if __name__ == "__main__":
    main()
