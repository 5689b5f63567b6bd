"""Stage aggregate: DuckDB over an explicit list of score files -> one row per cell."""

from __future__ import annotations

from pathlib import Path

import duckdb

from mmspec.tables import CELLS, write_table

# Pooled over steps (DESIGN.md metric contracts): tau = (accepted + steps) / steps.
CELLS_SQL = """
WITH s AS (SELECT * FROM read_parquet($files, union_by_name = true))
SELECT
  dataset, pair, method, hp, any_value(hparams) AS hparams, seed,
  json_extract_string(any_value(hparams), '$.view') AS view,
  CAST(json_extract(any_value(hparams), '$.gamma') AS INTEGER) AS gamma,
  json_extract_string(any_value(hparams), '$.acceptance') AS acceptance,
  CAST(json_extract(any_value(hparams), '$.temperature') AS DOUBLE) AS temperature,
  count(*) AS n_samples,
  sum(n_steps) AS n_steps,
  (sum(accepted_sum) + sum(n_steps)) / nullif(sum(n_steps), 0) AS tau,
  avg((accepted_sum + n_steps) / nullif(n_steps, 0)) AS tau_per_sample,
  sum(accepted_sum) / nullif(sum(n_steps), 0) AS accepted_mean,
  sum(ar_decode_s) / nullif(sum(decode_s), 0) AS speedup,
  avg(t_q_s) / nullif(avg(t_p_s), 0) AS latency_ratio,
  avg(CAST(lossless AS DOUBLE)) AS lossless_rate,
  avg(first_divergence) AS first_divergence_mean,
  avg(quality) AS quality,
  avg(ar_quality) AS ar_quality,
  avg(quality) / nullif(avg(ar_quality), 0) AS retention,
  sum(n_tokens) / nullif(sum(decode_s), 0) AS tokens_per_s,
  sum(ar_n_tokens) / nullif(sum(ar_decode_s), 0) AS ar_tokens_per_s,
  avg(prefill_s) AS prefill_s,
  avg(draft_visual_tokens) AS draft_visual_tokens,
  any_value(device) AS device
FROM s
GROUP BY dataset, pair, method, hp, seed
ORDER BY dataset, pair, method, hp, seed
"""


def run(score_files: list[str], out: str) -> int:
    missing = [f for f in score_files if not Path(f).exists()]
    if missing:
        raise FileNotFoundError(f"score files missing: {missing[:5]}")
    con = duckdb.connect()
    table = con.execute(CELLS_SQL, {"files": list(score_files)}).to_arrow_table()
    # TABED eq. 1: tau / (gamma * c + 1); AR has no draft, so its estimate is its tau (1).
    table = table.append_column("speedup_eq1", _eq1(table))
    write_table(table, out, CELLS)
    return table.num_rows


def _eq1(table):
    import pyarrow as pa

    values = []
    for tau, gamma, c in zip(
        table.column("tau").to_pylist(),
        table.column("gamma").to_pylist(),
        table.column("latency_ratio").to_pylist(),
        strict=True,
    ):
        if tau is None:
            values.append(None)
        elif gamma is None:
            values.append(tau)
        else:
            values.append(tau / (gamma * c + 1) if c is not None else None)
    return pa.array(values, pa.float64())
