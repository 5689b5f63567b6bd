"""The LLM judge: lmms-eval's VDD / VDC judge prompts sent to any OpenAI-protocol endpoint,
through a shared content-addressed cache (a directory of shards); and mmspec's embedded judge
server.

`judge_items` is the batch entry point: cache hits first, the misses judged concurrently, every
finished judgement put into the cache (in chunks, each a shard of its own, so a killed job keeps
what it judged), the batch's shards merged into one at the end.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed

from tqdm import tqdm

from mmspec.scoring.judge.cache import Compaction, JudgeCache, JudgeCacheError, cache_key, compact
from mmspec.scoring.judge.client import (
    JudgeClient,
    JudgeEndpoint,
    JudgeError,
    JudgeItem,
    Judgement,
    JudgeUnreachable,
    MissingApiKey,
)
from mmspec.scoring.judge.server import EmbeddedJudge
from mmspec.scoring.judge.templates import TEMPLATE_VERSION, TEMPLATES, BadReply, parse_score

__all__ = [
    "TEMPLATES",
    "TEMPLATE_VERSION",
    "BadReply",
    "Compaction",
    "EmbeddedJudge",
    "JudgeCache",
    "JudgeCacheError",
    "JudgeClient",
    "JudgeEndpoint",
    "JudgeError",
    "JudgeItem",
    "JudgeUnreachable",
    "Judgement",
    "MissingApiKey",
    "cache_key",
    "compact",
    "judge_items",
    "parse_score",
]

FLUSH_EVERY = 64  # judgements per cache write (each is a shard: not one file per judgement)
FLUSH_S = 30.0  # ... or sooner once this old, so a killed job loses little


def judge_items(
    items: Iterable[JudgeItem],
    client: JudgeClient,
    cache: JudgeCache | None,
    concurrency: int = 4,
) -> list[Judgement]:
    """The Judgement of each item, in input order.

    Cached successes are served (cached=True, calls=0); cached failures are judged again.
    Identical items are judged once: the first gets the Judgement, the others a copy with
    calls=0, so the calls add up to the requests made. Raises JudgeUnreachable (after putting
    what finished into the cache) when the endpoint cannot be reached.
    """
    items = list(items)
    model = client.endpoint.model
    keys = [cache_key(model, item) for item in items]
    unique = dict(zip(keys, items, strict=True))
    hits = cache.get(unique) if cache is not None else {}
    done = {
        key: Judgement(score, None, calls=0, cached=True)
        for key, (score, _) in hits.items()
        if score is not None
    }
    todo = {key: item for key, item in unique.items() if key not in done}
    pending: list[dict] = []
    flushed = time.monotonic()

    def record(key: str, judged: Judgement) -> None:
        done[key] = judged
        template = todo[key].template
        pending.append(
            {
                "key": key,
                "judge_model": model,
                "template": template,
                "template_version": TEMPLATE_VERSION[template],
                "score": judged.score,
                "error": judged.error,
            }
        )

    def flush() -> None:
        nonlocal flushed
        if cache is not None and pending:
            cache.put(pending)
        pending.clear()
        flushed = time.monotonic()

    if todo:
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="judge")
        futures = {pool.submit(client.judge, item): key for key, item in todo.items()}
        # progress on stderr (the job's log): a real endpoint takes seconds per answer
        progress = tqdm(total=len(todo), desc=f"judge ({len(done)} cached)", mininterval=5)
        try:
            for future in as_completed(futures):
                record(futures[future], future.result())  # JudgeUnreachable ends the batch
                progress.update()
                if len(pending) >= FLUSH_EVERY or time.monotonic() - flushed >= FLUSH_S:
                    flush()
        finally:
            progress.close()
            pool.shutdown(wait=True, cancel_futures=True)
            for future, key in futures.items():  # what finished while the batch was stopping
                if key not in done and future.done() and not future.cancelled():
                    if future.exception() is None:
                        record(key, future.result())
            flush()
            if cache is not None:
                cache.merge_own_shards()
    out, seen = [], set()
    for key in keys:
        judged = done[key]
        out.append(judged if key not in seen else dataclasses.replace(judged, calls=0))
        seen.add(key)
    return out
