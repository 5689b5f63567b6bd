"""Stage judge: an LLM judge scores every answer of one cell against its reference.

The judge is any OpenAI-compatible endpoint named in the config (`judge:`), or, with
`endpoint: embedded`, mmspec's own judge server started here on localhost for this job and
stopped after it (the toy world's exact rubric behind the same protocol and templates).
Judgements go through the shared content-addressed cache (a directory: each job adds a shard of
its own, no lock), so a rerun calls the endpoint only for answers not yet judged. A failed
judgement is stored as NULL with its error, never as a score.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager

import pyarrow as pa

from mmspec.data import media
from mmspec.scoring.judge import (
    EmbeddedJudge,
    JudgeCache,
    JudgeClient,
    JudgeEndpoint,
    JudgeItem,
    judge_items,
)
from mmspec.storage.tables import JUDGEMENTS, PREPARED, SAMPLES, read_table, write_table
from mmspec.sweep.arguments import settings_of
from mmspec.sweep.settings import JudgeSettings

HELP = "an LLM judge scores one cell's answers"

# the judge settings that JudgeEndpoint takes as they are
ENDPOINT_KEYS = (
    "model",
    "api_key_env",
    "timeout_s",
    "max_retries",
    "backoff_s",
    "max_backoff_s",
    "requests_per_s",
)


@contextmanager
def endpoint(settings: JudgeSettings | dict):
    """The judge endpoint of the config's `judge` block; the embedded server runs meanwhile."""
    settings = JudgeSettings.parse(settings)
    options = {k: getattr(settings, k) for k in ENDPOINT_KEYS}
    options = {k: v for k, v in options.items() if v is not None}
    if not settings.embedded:
        yield JudgeEndpoint(base_url=settings.endpoint, **options)
        return
    with EmbeddedJudge() as server:
        yield JudgeEndpoint(base_url=server.base_url, **options)


def run(
    samples: str, prepared: str, template: str, settings: JudgeSettings | dict, cache: str, out: str
) -> tuple[int, int, int]:
    """Judge one cell's answers with `template` (vdd, vdc) through the judgement cache directory
    `cache`; returns the endpoint calls made, the failed judgements and the answers judged."""
    settings = JudgeSettings.parse(settings)
    rows = read_table(samples, SAMPLES).to_pylist()
    refs = {(r["sample_id"], r["turn"]): r for r in read_table(prepared, PREPARED).to_pylist()}
    items = []
    for row in rows:
        ref = refs.get((row["sample_id"], row["turn"]))
        if ref is None:
            raise KeyError(
                f"{prepared}: sample {row['sample_id']} turn {row['turn']} of {samples} is "
                "missing there"
            )
        qa = ()
        if template == "vdc":
            if not ref["qa"]:
                raise ValueError(
                    f"{prepared}: sample {row['sample_id']} has no questions (qa) for the vdc "
                    "judge template"
                )
            qa = tuple(tuple(pair) for pair in json.loads(ref["qa"]))
        items.append(
            JudgeItem(
                template=template,
                question=media.prompt_text(
                    json.loads(ref["messages"]), f"{prepared}: sample {ref['sample_id']}", False
                ),
                reference=ref["reference"],
                answer=row["output_text"] or "",
                qa=qa,
            )
        )
    with endpoint(settings) as where:
        client = JudgeClient(where)
        judged = judge_items(items, client, JudgeCache(cache), settings.concurrency)
        calls = client.calls
    records = [
        {
            **{k: row[k] for k in ("dataset", "pair", "method", "hp", "hparams", "seed")},
            "sample_id": row["sample_id"],
            "turn": row["turn"],
            "judge_model": settings.model,
            "template": template,
            "judge_score": j.score,
            "judge_error": j.error,
            "cached": j.cached,
        }
        for row, j in zip(rows, judged, strict=True)
    ]
    write_table(pa.Table.from_pylist(records, schema=JUDGEMENTS), out, JUDGEMENTS)
    return calls, sum(j.score is None for j in judged), len(judged)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", required=True)
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--template", required=True, help="the dataset's judge template (vdd, vdc)")
    parser.add_argument(
        "--settings",
        type=settings_of("JudgeSettings"),
        required=True,
        help="the config's judge block (JSON, no key)",
    )
    parser.add_argument(
        "--cache", required=True, help="the shared judgement cache directory (results/judge/cache)"
    )
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    calls, failures, n = run(
        args.samples, args.prepared, args.template, args.settings, args.cache, args.out
    )
    print(
        f"judged {n} answers ({calls} judge calls, {failures} failed) -> {args.out}",
        file=sys.stderr,
    )
