"""A cell's samples table with given output texts, for tests that run the score stage without
decoding (every other column holds a plain greedy AR step record)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from mmspec.storage.tables import SAMPLES, write_table


def write_samples(path: Path, dataset: str, outputs: dict[str, str], method: str = "ar") -> str:
    """A samples table of cell (dataset, pair p, `method`): one greedy turn-0 row per sample id
    of `outputs`, answering its text; returns its path."""
    rows = [
        {
            "dataset": dataset,
            "pair": "p",
            "method": method,
            "hp": "default",
            "hparams": "{}",
            "seed": 0,
            "registry_method": "ar",
            "acceptance": "greedy",
            "lossless_rule": True,
            "temperature": 0.0,
            "sample_id": sample_id,
            "turn": 0,
            "output_ids": [1, 2],
            "output_text": text,
            "n_tokens": 2,
            "step_drafted": [0],
            "step_accepted": [0],
            "step_draft_s": [0.0],
            "step_verify_s": [0.01],
            "step_weights": [[1.0]],
            "step_depth": [0],
            "step_width": [0],
            "step_relaxed": [0],
            "prefill_s": 0.01,
            "decode_s": 0.01,
            "caption_s": 0.0,
            "ar_prefill_s": 0.01,
            "ar_decode_s": 0.01,
            "ar_n_tokens": 2,
            "t_q_s": 0.0,
            "t_p_s": 0.01,
            "draft_forwards_per_step": 0.0,
            "draft_visual_tokens": 0,
            "target_visual_tokens": 0,
            "device": "cpu",
            "versions": "{}",
        }  # fmt: skip
        for sample_id, text in outputs.items()
    ]
    write_table(pa.Table.from_pylist(rows, schema=SAMPLES), path, SAMPLES)
    return str(path)
