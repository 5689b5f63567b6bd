"""The metrics of the cells table (results/summary/cells.parquet), each declared once: its name,
Arrow type, how the aggregate computes it over a cell's score rows, its direction, its interval
columns, its definition and a one-line description.

Everything else is derived from CELL_METRICS: the aggregate's query (stages/aggregate.py), the
table's schema (CELLS, below, in this order), the report's metric definitions (report/page.py),
the claims' statistics' intervals and directions (claims/claim.py) and the metrics reference
(docs/reference/metrics.md, `mmspec reference`). So a new metric is one declaration here; one
without SQL is also computed in stages/aggregate.py (`_cells`), after the query.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from mmspec.scoring.lossless import TIE_ULPS
from mmspec.storage.tables import CELL_COLUMNS

DIRECTIONS = ("higher", "lower", "")


@dataclass(frozen=True)
class CellMetric:
    """A column of the cells table that the aggregate computes for each cell."""

    name: str
    type: pa.DataType
    # a DuckDB aggregate over the cell's score rows (one per sample-turn: tables.SCORES), or
    # None where stages/aggregate.py computes the column after the query
    sql: str | None
    comment: str  # what the column holds, in one line
    better: str = ""  # "higher" or "lower" is better; "" for a column without a direction
    interval: tuple[str, str] | None = None  # the (low, high) columns of its 95% interval
    definition: str = ""  # the glossary's text (HTML); "" where another column's covers it
    term: str = ""  # the glossary's heading where the definition covers several columns
    # how a row pooling a cell's seeds combines their values (report.pooled): counts are
    # summed; every other number is the mean of the seeds' values
    summed: bool = False

    def __post_init__(self):
        if self.better not in DIRECTIONS:
            raise ValueError(f"{self.name}: better is one of {DIRECTIONS}, got {self.better!r}")
        if self.summed and not pa.types.is_integer(self.type):
            raise ValueError(f"{self.name}: only a count (an integer column) is summed over seeds")

    @property
    def heading(self) -> str:
        """The glossary's heading of its definition."""
        return self.term or self.name


# Words the definitions below use, defined before them.
TERMS = [
    ("step", "one target verification forward."),
    ("accepted", "draft tokens accepted at a step, not counting the bonus/correction token."),
    (
        "sample-turn",
        "one turn of one sample: a row of the prepared dataset (a single-turn sample has one).",
    ),
]

_ULPS = ", ".join(f"{u:g} in {d}" for d, u in TIE_ULPS.items())

# In the cells table's column order: a metric's place here is its column's.
CELL_METRICS = [
    CellMetric("n_samples", pa.int64(), "count(*)", "the cell's sample-turns", summed=True),
    CellMetric(
        "steps",
        pa.int64(),
        "sum(steps)",
        "target verification forwards (AR: one per token after the first)",
        better="lower",
        definition="the steps of a cell, summed over its sample-turns (AR: one per token but "
        "the first).",
        summed=True,
    ),
    CellMetric(
        "new_tokens",
        pa.int64(),
        "sum(new_tokens)",
        "tokens the steps emitted (every output token but the prefill's first), after stop "
        "tokens and max_new_tokens cut the last step",
        definition="tokens the steps emitted: every output token but the first (which the "
        "prefill emits), after a stop token or max_new_tokens cut the last step.",
        summed=True,
    ),
    CellMetric(
        "tau",
        pa.float64(),
        "sum(new_tokens) / nullif(sum(steps), 0)",
        "new_tokens / steps, pooled over the cell",
        better="higher",
        interval=("tau_low", "tau_high"),
        definition="new_tokens / steps, pooled over the cell: a token accepted on the last step "
        "but cut by a stop token or max_new_tokens is not counted (tau_per_sample: the same per "
        "sample-turn, then averaged).",
    ),
    CellMetric(
        "tau_low",
        pa.float64(),
        None,
        "tau's 95% bootstrap interval over sample-turns: low end",
        term="tau_low, tau_high",
        definition="tau's 95% interval: over the seeds where a row pools several; of a single "
        "cell, the percentile bootstrap interval of the pooled tau, resampling the cell's "
        "sample-turns.",
    ),
    CellMetric("tau_high", pa.float64(), None, "tau's 95% interval: high end"),
    CellMetric(
        "tau_per_sample",
        pa.float64(),
        "avg(new_tokens / nullif(steps, 0))",
        "mean over sample-turns of their own tau",
        better="higher",
    ),
    # turn 0 and turn 1 alone: TABED's Table 1 rows; NULL where the cell has no such turn
    CellMetric(
        "tau_turn1",
        pa.float64(),
        "sum(new_tokens) FILTER (WHERE turn = 0) / nullif(sum(steps) FILTER (WHERE turn = 0), 0)",
        "tau of the first turns alone (turn 0: every single-turn sample); null where none",
        better="higher",
        interval=("tau_turn1_low", "tau_turn1_high"),
        term="tau_turn1, tau_turn2",
        definition="tau of the cell's first turns alone (every single-turn sample is one) and "
        "of its second turns alone (multi-turn dialogues, TABED's second-turn rows), pooled the "
        "same way, each with its 95% bootstrap interval over those sample-turns (_low, _high); "
        "empty where the cell has no such turn.",
    ),
    CellMetric("tau_turn1_low", pa.float64(), None, "tau_turn1's 95% interval: low end"),
    CellMetric("tau_turn1_high", pa.float64(), None, "tau_turn1's 95% interval: high end"),
    CellMetric(
        "tau_turn2",
        pa.float64(),
        "sum(new_tokens) FILTER (WHERE turn = 1) / nullif(sum(steps) FILTER (WHERE turn = 1), 0)",
        "tau of the second turns alone (turn 1 of multi-turn dialogues); null where none",
        better="higher",
        interval=("tau_turn2_low", "tau_turn2_high"),
    ),
    CellMetric("tau_turn2_low", pa.float64(), None, "tau_turn2's 95% interval: low end"),
    CellMetric("tau_turn2_high", pa.float64(), None, "tau_turn2's 95% interval: high end"),
    CellMetric(
        "accepted_mean",
        pa.float64(),
        "sum(accepted_sum) / nullif(sum(steps), 0)",
        "emitted draft tokens / steps (tau without the bonus)",
        better="higher",
        definition="emitted draft tokens / steps, pooled over the cell (tau without the "
        "bonus/correction token).",
    ),
    CellMetric(
        "relaxed_share",
        pa.float64(),
        "sum(relaxed_sum) / nullif(sum(accepted_sum), 0)",
        "share of the emitted draft tokens that a lossy rule accepted on a mismatch",
        definition="loose verification: the share of the accepted draft tokens that the rule "
        "accepted although the target would have emitted another token (0 for exact rules).",
    ),
    CellMetric(
        "speedup",
        pa.float64(),
        None,
        "AR decode time per emitted token / the method's, as on the cell's own job",
        better="higher",
        interval=("speedup_low", "speedup_high"),
        definition="AR decode time per emitted token / method decode time per emitted token, "
        "greedy and sampling alike, both as on the cell's own job (prefill excluded, reported "
        "separately). AR is decoded once per (dataset, pair, seed, temperature), by the AR "
        "cell; the method's job runs a short AR probe (AR's first "
        "<code>timing.ar_probe_tokens</code> steps) back to back with each sample-turn, and "
        "AR's time is the AR cell's time of every sample-turn scaled by ar_speed_ratio, so that "
        "a job on a slower node or under more load is compared with AR as it runs there "
        "(<code>timing.ar_reference: full</code> decodes AR in full beside every sample-turn "
        "instead).",
    ),
    CellMetric(
        "speedup_low",
        pa.float64(),
        None,
        "the speedup's 95% bootstrap interval over sample-turns: low end",
        term="speedup_low, speedup_high",
        definition="the speedup's 95% interval: over the seeds (see interval over seeds) where "
        "a row pools several; of a single cell (a seed's row, or a row of one seed), the "
        "percentile bootstrap interval resampling the cell's sample-turns, each with its probe, "
        "the AR cell's times of it and the method's (so the probes' noise is in the interval). "
        "A speedup in grey has an interval that contains 1: it is within noise of AR. Two rows "
        "differ beyond noise where their intervals are disjoint.",
    ),
    CellMetric("speedup_high", pa.float64(), None, "the speedup's 95% interval: high end"),
    CellMetric(
        "ar_speed_ratio",
        pa.float64(),
        None,
        "AR's step time in the cell's own job over the AR cell's on the same steps",
        definition="the probes' step time in the cell's own job / the AR cell's time of the "
        "same steps, pooled over the sample-turns: how much slower (above 1) or faster the "
        "job's device and load ran AR than the AR cell's (1 for the AR cell itself).",
    ),
    CellMetric(
        "speedup_eq1",
        pa.float64(),
        None,
        "tau / (k * c + 1), k = draft forwards per step (TABED eq. 1)",
        better="higher",
        definition="tau / (k * c + 1) with c = T_q / T_p measured in the same job and k the "
        "draft forwards per step (gamma for a chain; TABED eq. 1), which assumes a "
        "verification costs one AR step; on a GPU it about does, on a CPU verifying several "
        "tokens costs more (see verify_cost).",
    ),
    CellMetric(
        "speedup_eq1_verify",
        pa.float64(),
        None,
        "tau / (k * c + v): Eq. 1 with the measured cost v of a verification step",
        better="higher",
        definition="tau / (k * c + v): Eq. 1 with the verification's measured cost v "
        "(verify_cost) in place of 1. Its gap to measured speedup is what a step spends beyond "
        "its draft forwards and its verification: the drafting loop's own overhead.",
    ),
    CellMetric(
        "draft_forwards_per_step",
        pa.float64(),
        "avg(draft_forwards_per_step)",
        "k: draft forwards per step (gamma for a chain; the levels drafted for a tree)",
    ),
    CellMetric(
        "latency_ratio",
        pa.float64(),
        "avg(t_q_s) / nullif(avg(t_p_s), 0)",
        "c = T_q / T_p",
        better="lower",
        definition="c = T_q / T_p: the mean time of one draft forward over the mean time of "
        "one AR target step, both on the cell's own job: T_q measured there, T_p the AR cell's "
        "mean step scaled by ar_speed_ratio (the c of speedup_eq1).",
    ),
    CellMetric(
        "verify_cost",
        pa.float64(),
        "sum(verify_s) / nullif(sum(steps), 0) / nullif(avg(t_p_s), 0)",
        "v = mean verification step time (forward, acceptance, commit) / T_p",
        better="lower",
        definition="v: the mean time of a verification step (the target's forward over the "
        "proposal, the acceptance rule, the cache commit) over the mean time of one AR step "
        "(T_p, as for latency_ratio), both on the cell's own job (AR: 1 within timing noise).",
    ),
    CellMetric(
        "lossless_rate",
        pa.float64(),
        "avg(CAST(lossless AS DOUBLE))",
        "share of sample-turns whose output equals the AR cell's token for token",
        better="higher",
        definition="share of sample-turns whose greedy output equals the AR cell's token for "
        "token (empty for sampling cells); on a lossy rule it is shown in grey: divergence is "
        "expected, see retention. On a rule that preserves the target distribution "
        "(<code>lossless_rule</code>) each difference is checked in the cell's own job, on its "
        "device: see real_divergences.",
    ),
    CellMetric(
        "first_divergence_mean",
        pa.float64(),
        "avg(first_divergence)",
        "mean first position where a sample-turn's output differs from AR's",
        definition="mean over the sample-turns that differ from AR of the first output "
        "position where they differ (empty when none differ or for sampling cells).",
    ),
    # a greedy lossless cell's differences from its AR cell, checked on its own device; null
    # where nothing is checked (sampling, lossy rules)
    CellMetric(
        "near_tie_divergences",
        pa.int64(),
        "sum(near_tie_divergences)",
        "positions where the output differs from AR's on a rounding near-tie of AR's margin",
        term="near_tie_divergences, real_divergences, device_differences",
        definition="where a greedy lossless cell's sample-turns differ from the AR cell's, the "
        "target on the job's own device, fed each such output one token at a time as AR "
        "decodes, is checked at every position: each position where its argmax is not the "
        "output's token is a divergence (the counts are of positions, summed over the cell's "
        "sample-turns; the positions and margins are in the cell's samples.parquet), a "
        "near-tie when AR's margin between the two tokens is within a few units in the last "
        f"place of the dtype ({_ULPS}: a verification over several tokens rounds differently "
        "from AR's one-token forward), real beyond it. Real divergences are a bug, in red; "
        "near-ties are not failures. device_differences counts the sample-turns that differ "
        "from the AR cell's output but not from what the target emits on the job's own device "
        "(the AR cell ran on another device).",
        summed=True,
    ),
    CellMetric(
        "real_divergences",
        pa.int64(),
        "sum(real_divergences)",
        "positions where the output differs from AR's beyond a near-tie (failures)",
        better="lower",
        summed=True,
    ),
    CellMetric(
        "device_differences",
        pa.int64(),
        "CASE WHEN count(real_divergences) > 0 "
        "THEN count(*) FILTER (WHERE divergence_kind = 'device') END",
        "sample-turns that equal AR on the job's device (the AR cell's device differs)",
        summed=True,
    ),
    CellMetric(
        "quality",
        pa.float64(),
        "avg(quality)",
        "mean task metric over the sample-turns",
        better="higher",
        definition="the dataset's task metric (image generation: CLIP score), named in the "
        "column <code>metric</code> and in each frontier's heading.",
    ),
    CellMetric(
        "ar_quality", pa.float64(), "avg(ar_quality)", "the AR cell's quality, same sample-turns"
    ),
    CellMetric(
        "metric", pa.string(), "any_value(metric)", "the dataset's task metric, which quality is"
    ),
    CellMetric(
        "retention",
        pa.float64(),
        "avg(quality) / nullif(avg(ar_quality), 0)",
        "quality / AR quality",
        better="higher",
        interval=("retention_low", "retention_high"),
        definition="quality / AR quality.",
    ),
    CellMetric(
        "retention_low",
        pa.float64(),
        None,
        "the retention's 95% bootstrap interval over sample-turns paired with AR's: low end",
        term="retention_low, retention_high",
        definition="the retention's 95% interval: over the seeds where a row pools several; of "
        "a single cell, the percentile bootstrap interval resampling the cell's sample-turns "
        "each with its AR answer's quality (so what a sample's difficulty shares with AR "
        "cancels). Two rows whose intervals overlap are within noise of each other; a greedy "
        "lossless cell's is [1, 1].",
    ),
    CellMetric("retention_high", pa.float64(), None, "the retention's 95% interval: high end"),
    CellMetric(
        "tokens_per_s",
        pa.float64(),
        "sum(new_tokens) / nullif(sum(decode_s), 0)",
        "emitted tokens / decode time",
        better="higher",
        definition="emitted tokens / decode time.",
    ),
    CellMetric(
        "ar_tokens_per_s",
        pa.float64(),
        None,
        "AR's tokens_per_s as the speedup takes it: on the cell's own job",
    ),
    CellMetric(
        "prefill_s",
        pa.float64(),
        "avg(prefill_s)",
        "mean prompt prefill time per sample-turn",
        better="lower",
        definition="mean prompt prefill time per sample-turn, the draft's included (excluded "
        "from speedup).",
    ),
    CellMetric(
        "draft_visual_tokens",
        pa.float64(),
        "avg(draft_visual_tokens)",
        "visual tokens the draft was prefilled with, per sample-turn",
        better="lower",
        definition="visual tokens the draft was prefilled with, mean per sample-turn (the count "
        "behind draft_visual_share).",
    ),
    CellMetric(
        "draft_visual_share",
        pa.float64(),
        "sum(draft_visual_tokens) / nullif(sum(target_visual_tokens), 0)",
        "visual tokens the draft's prefill read / those the target's read (summed over views)",
        better="lower",
        definition="visual tokens the draft's prefill read / visual tokens the target's read, "
        "summed over the draft's views (1 for view M; about 1 - drop for SpecVLM's view S; 0 "
        "for T).",
    ),
    CellMetric(
        "caption_s",
        pa.float64(),
        "avg(caption_s)",
        "mean captioning time per sample-turn",
        better="lower",
        definition="mean time the captioner took on a sample-turn's images (0 for methods "
        "without the C view). Captions are computed once per image in a cached stage, so this "
        "per-sample value is what captioning would cost without the cache; like prefill_s, it "
        "is not part of the decode time.",
    ),
    # image generation only (else null): set-level (the same on every score row of the cell)
    CellMetric(
        "fid",
        pa.float64(),
        "any_value(fid)",
        "FID of the cell's images against the dataset's reference images",
        better="lower",
        interval=("fid_low", "fid_high"),
        term="fid, fid_retention",
        definition="image generation: FID of the cell's images against the dataset's reference "
        "images (lower is better), and AR FID / FID; fid_low / _high and fid_retention_low / "
        "_high: their 95% intervals, the percentile bootstrap resampling the prompts (each "
        "with its reference image, the cell's image and AR's, so what a prompt shares with AR "
        "cancels), shifted by the bootstrap's bias: a resample repeats images, which raises "
        "its FID, so with a few dozen images the plain percentiles can lie wholly above the "
        "point.",
    ),
    CellMetric("ar_fid", pa.float64(), "any_value(ar_fid)", "FID of the AR cell's images"),
    CellMetric(
        "fid_retention",
        pa.float64(),
        "any_value(ar_fid) / nullif(any_value(fid), 0)",
        "AR FID / FID (FID falls as quality rises)",
        better="higher",
        interval=("fid_retention_low", "fid_retention_high"),
    ),
    CellMetric("fid_low", pa.float64(), "any_value(fid_low)", "FID's 95% interval: low end"),
    CellMetric("fid_high", pa.float64(), "any_value(fid_high)", "FID's 95% interval: high end"),
    CellMetric(
        "fid_retention_low",
        pa.float64(),
        "any_value(fid_retention_low)",
        "fid_retention's 95% interval: low end",
    ),
    CellMetric(
        "fid_retention_high",
        pa.float64(),
        "any_value(fid_retention_high)",
        "fid_retention's 95% interval: high end",
    ),
    # a cell's rows all have an image (image generation) or none; $thumbnails: tables.THUMBNAILS
    CellMetric(
        "thumbnails",
        pa.list_(pa.binary()),
        "CASE WHEN count(image_png) > 0 "
        "THEN list(image_png ORDER BY sample_id, turn)[1:$thumbnails] END",
        "the first generated images (PNG, by sample id); image generation only",
    ),
    # judged datasets only (else null): over the sample-turns both judgements succeeded on;
    # failures are counted, never averaged in
    CellMetric(
        "judge_score",
        pa.float64(),
        "avg(judge_score) FILTER (WHERE ar_judge_score IS NOT NULL)",
        "the LLM judge's mean 0-5 score of the cell's answers",
        better="higher",
        term="judge_score, judge_retention, judge_failures",
        definition="judged datasets: the LLM judge's mean 0-5 score of the cell's answers, its "
        "ratio to the AR cell's mean on the same sample-turns (both over the sample-turns whose "
        "two judgements succeeded), and the cell's judgements that failed after retries "
        "(stored as null with their error, never scored); judge_retention_low / _high: its "
        "interval, as retention's.",
    ),
    CellMetric(
        "ar_judge_score",
        pa.float64(),
        "avg(ar_judge_score) FILTER (WHERE judge_score IS NOT NULL)",
        "the judge's mean score of the AR cell's answers, same sample-turns",
    ),
    CellMetric(
        "judge_retention",
        pa.float64(),
        "avg(judge_score) FILTER (WHERE ar_judge_score IS NOT NULL) "
        "/ nullif(avg(ar_judge_score) FILTER (WHERE judge_score IS NOT NULL), 0)",
        "judge_score / ar_judge_score",
        better="higher",
        interval=("judge_retention_low", "judge_retention_high"),
    ),
    CellMetric(
        "judge_retention_low",
        pa.float64(),
        None,
        "judge_retention's 95% interval, as retention's: low end",
    ),
    CellMetric(
        "judge_retention_high", pa.float64(), None, "judge_retention's 95% interval: high end"
    ),
    CellMetric(
        "judge_failures",
        pa.int64(),
        "CASE WHEN count(judge_score) + count(judge_error) > 0 THEN count(judge_error) END",
        "the cell's failed judgements (counted, never averaged in)",
        better="lower",
        summed=True,
    ),
]


def metric(name: str) -> CellMetric:
    """The declared metric `name`."""
    for m in CELL_METRICS:
        if m.name == name:
            return m
    raise KeyError(f"no cells metric {name!r} (cell_metrics.CELL_METRICS)")


def fields() -> list[tuple[str, pa.DataType]]:
    """The metrics as the cells table's columns, in order."""
    return [(m.name, m.type) for m in CELL_METRICS]


def glossary() -> list[tuple[str, str]]:
    """(heading, definition) of the terms, then of each defined metric, in column order."""
    return TERMS + [(m.heading, m.definition) for m in CELL_METRICS if m.definition]


def heading_of(name: str) -> str | None:
    """The glossary heading whose definition covers the column `name`, or else the metric whose
    interval it bounds (None: neither has a definition)."""
    for m in CELL_METRICS:
        if m.definition and name in m.heading.replace(" ", "").split(","):
            return m.heading
    bounded = [m.name for m in CELL_METRICS if m.interval and name in m.interval]
    return heading_of(bounded[0]) if bounded else None


# results/summary/cells.parquet: one row per cell: its identity and method, then its metrics
# (declared in cell_metrics: types, aggregates, meanings), then its device.
CELLS = pa.schema(
    CELL_COLUMNS
    + [
        ("label", pa.string()),  # display name: the paper's row name for registry methods
        ("registry_method", pa.string()),  # the registry method the config entry names
        ("group", pa.string()),  # the dataset's group in averages (config `group`: benchmark, ood)
        ("views", pa.string()),  # drafter views, one letter each ("MT"), U with its keep ratio
        ("weights", pa.string()),  # ensemble weight policy
        ("gamma", pa.int32()),
        ("tree", pa.string()),  # tree policy: chain, static, dynamic, sage (AR: null)
        ("acceptance", pa.string()),
        # whether the acceptance rule preserves the target's output distribution (AR: true);
        # lossy rules report retention and divergence, never a lossless failure
        ("lossless_rule", pa.bool_()),
        ("temperature", pa.float64()),
    ]
    + fields()
    + [("device", pa.string())]
)
