"""Stage score: per sample-turn lossless check against the AR cell, and task quality.

Greedy cells are compared with the AR cell token for token. For a lossless acceptance rule a
difference is a failure (`lossless` false); for a lossy rule it is expected, so `lossless` stays
null and the first divergence and the quality retention tell how far it strayed.
"""

from __future__ import annotations

import pyarrow as pa

from mmspec.scoring.lossless import first_divergence
from mmspec.scoring.task_quality import quality
from mmspec.tables import METHOD_COLUMNS, PREPARED, SAMPLES, SCORES, read_table, write_table

# per-step lists passed through to the scores (blocks table, weight plots, acceptance curves)
STEP_COLUMNS = ("step_drafted", "step_accepted", "step_weights", "step_depth", "step_width")


def run(samples: str, ar_samples: str, prepared: str, metric: str, out: str) -> None:
    rows = read_table(samples, SAMPLES).to_pylist()
    ar_rows = {(r["sample_id"], r["turn"]): r for r in read_table(ar_samples, SAMPLES).to_pylist()}
    refs = {(r["sample_id"], r["turn"]): r for r in read_table(prepared, PREPARED).to_pylist()}
    records = []
    for row in rows:
        key = (row["sample_id"], row["turn"])
        if key not in ar_rows or key not in refs:
            where = ar_samples if key not in ar_rows else prepared
            raise KeyError(f"{where}: sample {key[0]} turn {key[1]} of {samples} is missing there")
        ar, ref = ar_rows[key], refs[key]
        greedy = row["temperature"] == 0
        divergence = first_divergence(row["output_ids"], ar["output_ids"]) if greedy else None
        checked = greedy and row["lossless_rule"]

        records.append(
            {
                **{k: row[k] for k in ("dataset", "pair", "method", "hp", "hparams", "seed")},
                **{k: row[k] for k, _ in METHOD_COLUMNS},
                **{k: row[k] for k in ("sample_id", "turn", "n_tokens", "prefill_s", "decode_s")},
                **{k: row[k] for k in ("ar_decode_s", "ar_n_tokens", "t_q_s", "t_p_s", "device")},
                "draft_forwards_per_step": row["draft_forwards_per_step"],
                "draft_visual_tokens": row["draft_visual_tokens"],
                "target_visual_tokens": row["target_visual_tokens"],
                "scenario": ref["scenario"],
                "steps": len(row["step_accepted"]),
                "new_tokens": row["n_tokens"] - 1,
                "accepted_sum": sum(row["step_accepted"]),
                "drafted_sum": sum(row["step_drafted"]),
                **{k: row[k] for k in STEP_COLUMNS},
                "caption_s": row["caption_s"],
                "lossless": (divergence is None) if checked else None,
                "first_divergence": divergence,
                "quality": quality(
                    metric, ref["scenario"], row["turn"], row["output_text"], ref["reference"]
                ),
                "ar_quality": quality(
                    metric, ref["scenario"], row["turn"], ar["output_text"], ref["reference"]
                ),
            }
        )
    write_table(pa.Table.from_pylist(records, schema=SCORES), out, SCORES)
