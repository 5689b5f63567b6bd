"""Stage score: per sample-turn lossless check against the AR cell, and task quality.

Task quality is the dataset's task metric (`scoring.metric_catalog`) of each output and of the
AR cell's against the sample's references: the prepared `references` (a list of answers) where
the dataset gives a list, else its `reference` text. A reference the metric cannot take (a list
for a metric of one text, one text for VQA accuracy) stops the job before anything is written.

Greedy cells are compared with the AR cell token for token. For a lossless acceptance rule a
difference is a failure (`lossless` false); for a lossy rule it is expected, so `lossless` stays
null and the first divergence and the quality retention tell how far it strayed.

Image generation (metric `image`) reads the images the generate stage decoded, for the cell and
its AR cell; quality is each image's CLIP score against its caption, and FID compares each
cell's images with the dataset's reference images.

A judged dataset (config `datasets.<name>.judge`) also reads the judge stage's judgements of the
cell and of its AR cell: `judge_score` / `ar_judge_score` per sample-turn, null with
`judge_error` where a judgement failed.
"""

from __future__ import annotations

import argparse

import pyarrow as pa

from mmspec.scoring import metric_catalog
from mmspec.scoring.lossless import first_divergence
from mmspec.scoring.lossless import kind as divergence_kind
from mmspec.scoring.task_metric import Sample
from mmspec.storage.tables import (
    JUDGEMENTS,
    METHOD_COLUMNS,
    PREPARED,
    SAMPLES,
    SCORES,
    read_table,
    write_table,
)
from mmspec.sweep.arguments import settings_of
from mmspec.sweep.settings import ImageModels

HELP = "lossless check and quality of one cell"
WARM = True

# per-step lists passed through to the scores (blocks table, weight plots, acceptance curves)
STEP_COLUMNS = ("step_drafted", "step_accepted", "step_weights", "step_depth", "step_width")


IMAGE_METRIC = "image"  # FID and CLIP score of generated images
CLIP_SCORE = "clip_score"  # what an image's quality is (its CLIP score against its caption)


def run(
    samples: str,
    ar_samples: str,
    prepared: str,
    metric: str,
    out: str,
    image_models: ImageModels | dict | None = None,
    judgements: tuple[str, str] | None = None,
) -> None:
    """Score one cell; `image_models` names FID's feature network and the CLIP model
    (`fid_features`, `clip`) for metric `image`; `judgements` the judge stage's tables of the
    cell and of its AR cell."""
    rows = read_table(samples, SAMPLES).to_pylist()
    ar_rows = {(r["sample_id"], r["turn"]): r for r in read_table(ar_samples, SAMPLES).to_pylist()}
    refs = {(r["sample_id"], r["turn"]): r for r in read_table(prepared, PREPARED).to_pylist()}
    scorer = None if metric == IMAGE_METRIC else metric_catalog.get(metric)()
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
        counted = divergence_counts(row, divergence) if checked else DIVERGENCE_UNCHECKED

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
                "relaxed_sum": sum(row["step_relaxed"] or []),
                "drafted_sum": sum(row["step_drafted"]),
                "verify_s": sum(row["step_verify_s"]),
                **{k: row[k] for k in STEP_COLUMNS},
                "caption_s": row["caption_s"],
                "lossless": (divergence is None) if checked else None,
                "first_divergence": divergence,
                **counted,
                "check_s": row["check_s"],
                "ar_cell_decode_s": ar["decode_s"],
                "ar_cell_n_tokens": ar["n_tokens"],
                **probe_times(row, ar),
                "metric": CLIP_SCORE if scorer is None else scorer.name,
            }
        )
        if scorer is not None:
            reference = references(scorer, ref, prepared)
            sample = Sample(row["sample_id"], row["turn"], ref["scenario"])
            records[-1]["quality"] = scorer.score(row["output_text"], reference, sample)
            records[-1]["ar_quality"] = scorer.score(ar["output_text"], reference, sample)
    if metric == IMAGE_METRIC:
        if not image_models:
            raise ValueError(f"{samples}: metric {IMAGE_METRIC!r} needs the image models")
        keys = [(r["sample_id"], r["turn"]) for r in rows]
        paired = [ar_rows[k] for k in keys], [refs[k] for k in keys]
        models = ImageModels.parse(image_models)
        _score_images(records, rows, *paired, models, (samples, ar_samples, prepared))
    if judgements:
        _add_judgements(records, *judgements)
    write_table(pa.Table.from_pylist(records, schema=SCORES), out, SCORES)


def probe_times(row: dict, ar: dict) -> dict:
    """The steps of a job's AR run of a sample-turn (a probe of AR's first steps, or the whole
    decode) as timed in the job and in the AR cell: the speedup's measure of the job's device
    and load against the AR cell's. Null where either has no step times (an older table)."""
    steps, cell_steps = row["ar_step_s"], ar["step_verify_s"]
    if not steps or not cell_steps:
        return {"ar_probe_s": None, "ar_cell_probe_s": None}
    n = min(len(steps), len(cell_steps))
    return {"ar_probe_s": sum(steps[:n]), "ar_cell_probe_s": sum(cell_steps[:n])}


DIVERGENCE_UNCHECKED = {
    "near_tie_divergences": None,
    "real_divergences": None,
    "divergence_kind": None,
    "divergence_max_ulps": None,
}


def divergence_counts(row: dict, divergence: int | None) -> dict:
    """A greedy lossless sample-turn's divergences from AR: none when it equals the AR cell;
    else what its generate job found on its own device (`scoring.lossless`), and a difference it
    did not check (a job run without the AR cell's samples) as one real divergence."""
    if divergence is None:
        return {**DIVERGENCE_UNCHECKED, "near_tie_divergences": 0, "real_divergences": 0}
    ulps = row["divergence_ulps"]
    if ulps is None:
        return {**DIVERGENCE_UNCHECKED, "near_tie_divergences": 0, "real_divergences": 1}
    tie = row["tie_ulps"]
    return {
        "near_tie_divergences": sum(u <= tie for u in ulps),
        "real_divergences": sum(u > tie for u in ulps),
        "divergence_kind": divergence_kind(ulps, tie),
        "divergence_max_ulps": max(ulps, default=None),
    }


def references(metric, ref: dict, prepared: str) -> str | list[str]:
    """What `metric` scores a prepared row's outputs against: its list of answers, else its
    reference text; ValueError naming the file and sample when the metric cannot take it."""
    reference = ref["references"] if ref["references"] is not None else ref["reference"]
    problem = metric.problem(reference)
    if problem:
        raise ValueError(
            f"{prepared}: sample {ref['sample_id']} turn {ref['turn']}: metric {metric.name!r} "
            f"{problem} (a dataset's `metric:` must take what its `columns.answer` holds: "
            "docs/reference/metrics.md says what each metric takes)"
        )
    return reference


def _score_images(records, rows, ar_rows, refs, models: ImageModels, paths) -> None:
    """CLIP score per image and FID per cell, for the cell's images and its AR cell's (the
    generate stage decoded them)."""
    from mmspec.models.loading import resolve_ref
    from mmspec.scoring import image_metrics

    samples, ar_samples, prepared = paths
    images, ar_images = _generated(rows, samples), _generated(ar_rows, ar_samples)
    references = image_metrics.decode_pngs([r["images"][0] for r in refs], prepared)
    # scored at the references' size (the thumbnails keep the generated one)
    size = references.shape[1:3]
    scored, ar_scored = (image_metrics.resized(i, size) for i in (images, ar_images))
    captions = [r["reference"] for r in refs]
    features = image_metrics.feature_network(resolve_ref(models.fid_features))
    scorer = image_metrics.clip_scorer(resolve_ref(models.clip))
    # FID and AR's from one pass of features, with their intervals over the prompts
    vectors = (image_metrics.image_features(i, features) for i in (references, scored, ar_scored))
    fids = image_metrics.fid_intervals(*vectors)
    clips = image_metrics.clip_score(scored, captions, scorer)
    ar_clips = image_metrics.clip_score(ar_scored, captions, scorer)
    for record, row, clip, ar_clip in zip(records, rows, clips, ar_clips, strict=True):
        record.update(quality=clip, ar_quality=ar_clip, image_png=row["image_png"], **fids)


def _add_judgements(records: list[dict], path: str, ar_path: str) -> None:
    """The judge's scores of each record's answer and of the AR cell's, and the error of a
    failed judgement of the cell's answer."""
    tables = [read_table(p, JUDGEMENTS).to_pylist() for p in (path, ar_path)]
    judged, ar_judged = ({(r["sample_id"], r["turn"]): r for r in t} for t in tables)
    for record in records:
        key = (record["sample_id"], record["turn"])
        for table, where in ((judged, path), (ar_judged, ar_path)):
            if key not in table:
                raise KeyError(f"{where}: sample {key[0]} turn {key[1]} has no judgement")
        record["judge_score"] = judged[key]["judge_score"]
        record["judge_error"] = judged[key]["judge_error"]
        record["ar_judge_score"] = ar_judged[key]["judge_score"]


def _generated(rows: list[dict], path: str):
    """The generated images of a samples table, uint8 [N, H, W, 3]."""
    from mmspec.scoring import image_metrics

    missing = [r["sample_id"] for r in rows if r["image_png"] is None]
    if missing:
        raise ValueError(
            f"{path}: samples {missing[:3]} have no generated image (image_png); the table "
            "is not an image-generation cell's, or is stale: rerun its generate job"
        )
    return image_metrics.decode_pngs([r["image_png"] for r in rows], path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", required=True)
    parser.add_argument("--ar-samples", required=True)
    parser.add_argument("--prepared", required=True)
    parser.add_argument(
        "--metric",
        required=True,
        help="the dataset's task metric, by its name in the metric catalog "
        "(docs/reference/metrics.md), or image: FID and CLIP score of generated images",
    )
    parser.add_argument(
        "--image-models",
        type=settings_of("ImageModels"),
        default=None,
        help="metric image: JSON {fid_features, clip} model references",
    )
    parser.add_argument("--judgements", default=None, help="the judge stage's table of the cell")
    parser.add_argument("--ar-judgements", default=None, help="... and of its AR cell")
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    if (args.judgements is None) != (args.ar_judgements is None):
        raise ValueError("--judgements and --ar-judgements go together")
    judged = (args.judgements, args.ar_judgements) if args.judgements else None
    run(
        args.samples,
        args.ar_samples,
        args.prepared,
        args.metric,
        args.out,
        args.image_models,
        judged,
    )
