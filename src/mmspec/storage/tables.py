"""The Parquet contracts between stages: one pyarrow schema per table, plus safe read/write."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mmspec.storage import durable, integrity

# results/prepared/<dataset>.parquet: one row per sample and turn.
# `messages` is the conversation up to and including this turn's user message, as JSON in the
# Hugging Face chat format: [{"role": "user", "content": [{"type": "image"}, {"type": "text",
# "text": "..."}]}, {"role": "assistant", "content": [...]}, ...]. Earlier assistant turns hold the
# reference answers, so every row is self-contained. `images` holds the PNG bytes of every picture
# of `messages`, in order of appearance; `image_ids` their content hashes (keys of the visual
# cache). A video is an item {"type": "video", "frames": n} taking the next n pictures, its
# sampled frames (`data.media`). An image-generation sample (`media.IMAGE_GENERATION`) has a text
# prompt (its caption), and `images` holds its reference image: FID's real set.
# `reference` is the answer as text (what judges read; a list of answers as its JSON), and
# `references` the list itself when the dataset's answer column holds a list (TextVQA's ten human
# answers), null when it holds one text: a task metric scores against `references` where it is
# set, else `reference` (stages.score).
PREPARED = pa.schema(
    [
        ("sample_id", pa.string()),
        ("turn", pa.int32()),
        ("scenario", pa.string()),
        ("messages", pa.string()),
        ("images", pa.list_(pa.binary())),
        ("image_ids", pa.list_(pa.string())),
        ("reference", pa.string()),
        ("references", pa.list_(pa.string())),
        # questions with their correct answers for a judge's QA stage (VDC's qa_list), JSON
        # [[question, answer], ...]; null unless the dataset maps `columns.qa`
        ("qa", pa.string()),
    ]
)

# results/visual/<model>/<dataset>.parquet: one row per distinct image and, for a family that
# reads videos as videos, per distinct video (`image_id` = `data.media.video_id` of its frames).
# `embeds`: projector output [n_tokens, hidden] (what replaces the image tokens);
# `features`: vision-tower output before the projector [n_tokens, vision_hidden] (pooled views).
# Both are .npy bytes (dtype and shape included).
VISUAL = pa.schema(
    [
        ("image_id", pa.string()),
        ("n_tokens", pa.int32()),
        ("embeds", pa.binary()),
        ("features", pa.binary()),
    ]
)

# results/captions/<captioner>/<dataset>.parquet: one row per distinct image: its caption from
# the configured captioning model and the seconds that took (view C; computed once per image).
CAPTIONS = pa.schema(
    [
        ("image_id", pa.string()),
        ("caption", pa.string()),
        ("caption_s", pa.float64()),
    ]
)

# Identity of a cell, repeated on every row of its generate and score tables.
CELL_COLUMNS = [
    ("dataset", pa.string()),
    ("pair", pa.string()),
    ("method", pa.string()),
    ("hp", pa.string()),  # the slug of the hyperparameters (a path component)
    ("hparams", pa.string()),  # JSON of the full resolved method spec
    ("seed", pa.int64()),
]

# The cell's method, typed (methods.spec.MethodSpec.columns), on every generate and score row.
METHOD_COLUMNS = [
    ("registry_method", pa.string()),
    ("views", pa.string()),  # null for AR
    ("weights", pa.string()),
    ("tree", pa.string()),
    ("gamma", pa.int32()),  # chains only
    ("acceptance", pa.string()),
    ("lossless_rule", pa.bool_()),  # the acceptance rule preserves the target's distribution
    ("temperature", pa.float64()),
]

# results/generate/.../samples.parquet: one row per sample-turn.
SAMPLES = pa.schema(
    CELL_COLUMNS
    + METHOD_COLUMNS
    + [
        ("sample_id", pa.string()),
        ("turn", pa.int32()),
        ("output_ids", pa.list_(pa.int32())),
        ("output_text", pa.string()),
        ("n_tokens", pa.int32()),
        # per verification step (AR: one per token after the first); accepted: draft tokens
        # accepted and emitted (a stop token or max_new_tokens may cut the last step)
        ("step_drafted", pa.list_(pa.int32())),
        ("step_accepted", pa.list_(pa.int32())),
        ("step_draft_s", pa.list_(pa.float64())),
        ("step_verify_s", pa.list_(pa.float64())),
        # ensemble weights the drafter used at each step, one per view ([1.0] for one view)
        ("step_weights", pa.list_(pa.list_(pa.float32()))),
        # shape of each step's proposal: levels, and most nodes on one level (chain: gamma, 1)
        ("step_depth", pa.list_(pa.int32())),
        ("step_width", pa.list_(pa.int32())),
        # accepted tokens a lossy rule accepted without an exact match (loose verification)
        ("step_relaxed", pa.list_(pa.int32())),
        ("prefill_s", pa.float64()),
        ("decode_s", pa.float64()),
        # time the captioner took on this sample's images (view C; cached, so paid once per image)
        ("caption_s", pa.float64()),
        # the job's AR run of the sample-turn, back to back with the method: a probe of AR's
        # first steps (config timing.ar_reference), or the whole decode (full); an AR cell's own.
        # ar_step_s: the time of each of its steps
        ("ar_prefill_s", pa.float64()),
        ("ar_decode_s", pa.float64()),
        ("ar_n_tokens", pa.int32()),
        ("ar_step_s", pa.list_(pa.float64())),
        # greedy cells of a lossless rule whose output differs from the AR cell's: the positions
        # where the target's own argmax (fed the output one token at a time, on the job's device)
        # is not the output's token, and AR's margin there in ulp of the dtype (empty: the method
        # equals AR on this device); null where there was nothing to check. check_s: its time
        ("divergence_positions", pa.list_(pa.int32())),
        ("divergence_ulps", pa.list_(pa.float64())),
        ("tie_ulps", pa.float64()),  # the near-tie margin of the model's dtype (TIE_ULPS)
        ("check_s", pa.float64()),
        # per job: mean forward time of draft (t_q) and target (t_p), and draft forwards per
        # verification step (gamma for a chain; the levels drafted for a tree)
        ("t_q_s", pa.float64()),
        ("t_p_s", pa.float64()),
        ("draft_forwards_per_step", pa.float64()),
        ("draft_visual_tokens", pa.int32()),  # visual tokens the draft was prefilled with
        ("target_visual_tokens", pa.int32()),
        ("device", pa.string()),
        ("versions", pa.string()),  # JSON {package: version}
        # image generation: the generated image as PNG, decoded by the target (else null)
        ("image_png", pa.binary()),
    ]
)

# results/score/.../scores.parquet: one row per sample-turn.
SCORES = pa.schema(
    CELL_COLUMNS
    + METHOD_COLUMNS
    + [
        ("sample_id", pa.string()),
        ("turn", pa.int32()),
        ("scenario", pa.string()),
        ("n_tokens", pa.int32()),
        ("steps", pa.int32()),
        ("new_tokens", pa.int32()),  # tokens the steps emitted: n_tokens - 1 (the prefill's)
        ("accepted_sum", pa.int64()),  # sum over steps of accepted and emitted draft tokens
        ("relaxed_sum", pa.int64()),  # of which a lossy rule relaxed (accepted on a mismatch)
        ("drafted_sum", pa.int64()),
        # time of the steps' verifications (target forward, acceptance, cache commit), summed
        ("verify_s", pa.float64()),
        ("step_drafted", pa.list_(pa.int32())),
        ("step_accepted", pa.list_(pa.int32())),
        ("step_weights", pa.list_(pa.list_(pa.float32()))),
        ("step_depth", pa.list_(pa.int32())),
        ("step_width", pa.list_(pa.int32())),
        ("caption_s", pa.float64()),
        ("prefill_s", pa.float64()),
        ("decode_s", pa.float64()),
        ("ar_decode_s", pa.float64()),
        ("ar_n_tokens", pa.int32()),
        ("t_q_s", pa.float64()),
        ("t_p_s", pa.float64()),
        ("draft_forwards_per_step", pa.float64()),
        ("draft_visual_tokens", pa.int32()),
        ("target_visual_tokens", pa.int32()),
        # equals the AR output token for token; null when the cell samples (temperature > 0)
        ("lossless", pa.bool_()),
        ("first_divergence", pa.int32()),  # null when identical or not checked
        # where a greedy lossless cell's output differs from the AR cell's (else 0, or null when
        # not checked: sampling, lossy rules): the positions where the target's own argmax on
        # the job's device is not the output's token, as near-ties (AR's margin within the
        # dtype's scoring.lossless.TIE_ULPS) and real divergences (beyond it; a difference the
        # job did not check counts as one), and whether it agrees with AR on the job's device
        ("near_tie_divergences", pa.int32()),
        ("real_divergences", pa.int32()),
        ("divergence_kind", pa.string()),  # null, "device", "near_tie", "real"
        ("divergence_max_ulps", pa.float64()),  # AR's largest margin at them
        ("check_s", pa.float64()),  # the generate job's time on that check
        # the speedup's reference: the AR cell's own decode of this sample-turn, and the steps
        # of the job's AR run (its probe, or the whole decode) timed in the job and in the AR
        # cell (their ratio is the job's device and load against the AR cell's)
        ("ar_cell_decode_s", pa.float64()),
        ("ar_cell_n_tokens", pa.int32()),
        ("ar_probe_s", pa.float64()),
        ("ar_cell_probe_s", pa.float64()),
        ("quality", pa.float64()),  # image generation: the image's CLIP score
        ("ar_quality", pa.float64()),  # quality of the AR cell on the same sample-turn
        ("metric", pa.string()),  # the task metric quality is ("clip_score": image generation)
        # image generation only (else null): the cell's FID and the AR cell's against the
        # dataset's reference images (set-level, so the same on every row of the cell), and the
        # generated image (from the samples; the report's thumbnails)
        ("fid", pa.float64()),
        ("ar_fid", pa.float64()),
        # their 95% intervals, bootstrapping the prompts (scoring.image_metrics.fid_intervals)
        ("fid_low", pa.float64()),
        ("fid_high", pa.float64()),
        ("fid_retention_low", pa.float64()),
        ("fid_retention_high", pa.float64()),
        ("image_png", pa.binary()),
        # judged datasets only (else null): the LLM judge's 0-5 score of this answer and of the
        # AR cell's, and the error of a failed judgement (its score stays null)
        ("judge_score", pa.float64()),
        ("ar_judge_score", pa.float64()),
        ("judge_error", pa.string()),
        ("device", pa.string()),
    ]
)

# results/judge/.../judgements.parquet: one row per sample-turn of a cell whose dataset names a
# judge template (config `datasets.<name>.judge`): the LLM judge's 0-5 score of the answer against
# the reference, or null with the error when the judgement failed (never scored as 0). `cached`:
# served from results/judge/cache/ (the content-addressed cache) without a call.
JUDGEMENTS = pa.schema(
    CELL_COLUMNS
    + [
        ("sample_id", pa.string()),
        ("turn", pa.int32()),
        ("judge_model", pa.string()),
        ("template", pa.string()),
        ("judge_score", pa.float64()),
        ("judge_error", pa.string()),
        ("cached", pa.bool_()),
    ]
)

# results/judge/cache/*.parquet: the shards of the judge's content-addressed cache, shared by
# every cell and rerun (scoring.judge.cache), each written once by one job: a row per judged
# content; `key` is the sha256 of what decides the judgement, and a key may have several rows
# across shards (a success wins); score null: the judgement failed (kept with its error,
# retried next time). The single file of earlier versions, results/judge/cache.parquet, has it too.
JUDGE_CACHE = pa.schema(
    [
        ("key", pa.string()),
        ("judge_model", pa.string()),
        ("template", pa.string()),
        ("template_version", pa.string()),
        ("score", pa.float64()),
        ("error", pa.string()),
        ("created", pa.timestamp("us", tz="UTC")),
    ]
)

# results/summary/cells.parquet: one row per cell, `cell_metrics.CELLS` (its columns are the
# declared metrics: a definition's wording is not part of the stages that write the tables here)
THUMBNAILS = 8

# results/summary/blocks.parquet: one row per verification step of every sample-turn of every cell.
BLOCKS = pa.schema(
    [
        ("dataset", pa.string()),
        ("pair", pa.string()),
        ("method", pa.string()),
        ("hp", pa.string()),
        ("seed", pa.int64()),
        ("label", pa.string()),
        ("views", pa.string()),
        ("sample_id", pa.string()),
        ("turn", pa.int32()),
        ("step", pa.int32()),  # 0-based index of the step within the sample-turn
        ("position", pa.int32()),  # output tokens emitted before this step
        ("drafted", pa.int32()),  # proposal nodes (tree size; gamma for a chain)
        ("accepted", pa.int32()),  # accepted path length
        ("depth", pa.int32()),  # proposal levels
        ("width", pa.int32()),  # most proposal nodes on one level
        ("weights", pa.list_(pa.float32())),  # one per view, in `views` order
    ]
)


# results/summary/claims.parquet: each paper's claims (config/claims/) checked on the cells, one
# row per (claim, results folder, set of cells it was checked on) (claims/scorecard.py).
CLAIMS = pa.schema(
    [
        ("paper", pa.string()),
        ("claim_id", pa.string()),
        ("claim", pa.string()),  # the claim in one sentence
        ("where", pa.string()),  # where the paper states it
        ("paper_numbers", pa.string()),  # the paper's own numbers for it
        ("section", pa.string()),  # the report section that shows it (anchor)
        ("shown_by", pa.string()),  # the toy preset that studies it in full
        ("note", pa.string()),
        ("harness", pa.bool_()),  # a check of mmspec itself, apart from the paper's claims
        ("run", pa.string()),  # the results folder or cells file
        ("set", pa.string()),  # the set of cells: dataset, pair, temperature, seed
        ("verdict", pa.string()),  # holds, fails, inconclusive, not applicable
        ("measured", pa.string()),  # the numbers behind the verdict
        ("by_points", pa.string()),  # the verdict of the point estimates alone
    ]
)


# results/drafters/<pair>/<kind>/<hp>/curves.parquet: a drafter head's training curve, one row
# per evaluation (training.heads): the training loss at that step and, on the held-out
# sequences, the feature loss, intermediate-feature loss (DREAM; 0 for EAGLE), KL divergence
# from the target's next-token distribution and top-1 agreement with the target; then a column
# for each held-out metric a head kind's own loss adds (`heldout_<name>`).
HEAD_CURVES = pa.schema(
    [
        ("step", pa.int64()),
        ("loss", pa.float64()),
        ("heldout_feature_loss", pa.float64()),
        ("heldout_intermediate_loss", pa.float64()),
        ("heldout_kl", pa.float64()),
        ("heldout_top1", pa.float64()),
    ]
)


def write_table(table: pa.Table, path: str | Path, schema: pa.Schema) -> None:
    """Write `table` as Parquet, durably and atomically (`mmspec.storage.durable`), after checking
    it against `schema`."""
    path = Path(path)
    present = set(table.column_names)  # (column_names builds a new list on each access)
    missing = [name for name in schema.names if name not in present]
    if missing:
        raise ValueError(f"{path}: table lacks columns {missing} required by its contract")
    table = table.select(schema.names).cast(schema)
    with durable.atomic_file(path) as sink:
        # page checksums: bytes changed in the middle of the file fail the reader
        pq.write_table(table, sink, write_page_checksum=True)


class CorruptTableError(ValueError):
    """A stage's Parquet input that cannot be read (truncated or corrupt)."""


def read_table(path: str | Path, schema: pa.Schema) -> pa.Table:
    """Read a stage's Parquet output, failing clearly if it does not hold the contract's columns."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (has the stage that writes it run?)")
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        if getattr(e, "errno", None) is not None:
            raise  # the disk's or the network's trouble (EIO, ESTALE): the file may be whole
        # A truncated or corrupt output (a copy cut short, a disk's fault): out of the way, it
        # is missing, and the workflow rebuilds it (every output is a target) with what
        # depends on it.
        cause = " ".join(str(e).split())
        aside = integrity.set_aside(path)
        raise CorruptTableError(
            f"{path}: corrupt or truncated Parquet file ({cause}); moved aside to {aside.name}: "
            "rerun the same snakemake command line, which rebuilds it and what depends on it"
        ) from None
    present = set(table.column_names)  # (column_names builds a new list on each access)
    missing = [name for name in schema.names if name not in present]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}; expected the contract {schema.names}")
    return table
