"""Part 2, the engine benchmark (`mmspec.bench.engine`) on the sweep's trained toy pair, in this
process: mmspec AR against HF greedy `generate`, mmspec chain SD against HF assisted generation,
token for token."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

from mmspec.gpu_check.row import Row
from mmspec.gpu_check.settings import Settings


def bench_inputs(out: Path, sweep: dict) -> tuple[Path, Path, Path]:
    """(target, draft, prepared) of the first cell of the validated `sweep` that drafts with a
    toy draft model on a text dataset: the trained models and data the benchmark reads."""
    from mmspec.data.media import IMAGE_GENERATION
    from mmspec.sweep import config_checks, model_refs
    from mmspec.sweep.cells import cells

    for cell in cells(sweep):
        pair = sweep["pairs"][cell.pair]
        refs = [pair["target"], pair.get("draft", "")]
        # models the workflow trained (the toy world's), where the sweep's run wrote them
        folders = [model_refs.workflow_output(r) if r else None for r in refs]
        text = config_checks.dataset_task(sweep, cell.dataset) != IMAGE_GENERATION
        if cell.spec.drafter == "model" and text and all(folders):
            target, draft = (out / folder for folder in folders)
            return target, draft, out / "results" / "prepared" / f"{cell.dataset}.parquet"
    raise ValueError("the sweep has no cell drafting with a toy draft model on a text dataset")


def bench_rows(out: Path, sweep: dict, settings: Settings, echo) -> list[Row]:
    """Run the engine benchmark (its output to gpu_check/bench.log, its numbers to
    gpu_check/bench.json); its three comparisons as rows."""
    from mmspec.bench import engine

    folder = out / "gpu_check"
    try:
        target, draft, prepared = bench_inputs(out, sweep)
    except ValueError as e:
        return [Row("bench", "FAIL", why=str(e))]
    numbers, log = folder / "bench.json", folder / "bench.log"
    numbers.unlink(missing_ok=True)
    options = engine.Options(
        target=str(target),
        draft=str(draft),
        prepared=str(prepared),
        samples=settings.bench_samples,
        warmup=settings.bench_warmup,
        max_new_tokens=settings.bench_max_new,
    )
    failure = ""
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            report = engine.measure(options)
            print(engine.summary(report))
        except Exception as error:  # a benchmark that cannot run fails its rows, not the check
            traceback.print_exc()
            failure = f"{type(error).__name__}: {error}"
    if failure:
        echo(f"  bench: failed ({log})")
        return [Row("bench", "FAILED", why=f"{failure} (log: {log})")]
    engine.write_json(report, numbers)
    echo(f"  bench: {'done' if engine.passed(report) else 'outputs differ'} ({log})")
    return bench_table(report)


def bench_table(report: dict) -> list[Row]:
    """The benchmark's report as rows: each speedup is over the row's own baseline."""
    runners, eq1, differ = report["runners"], report["eq1"], report["mismatches_vs_hf_generate"]
    n = report["samples"]

    def seconds(name):
        return runners[name]["seconds"]

    def same(name):
        return f"== HF generate ({n})" if not differ[name] else f"{differ[name]}/{n} differ"

    rows = [
        Row(
            "bench: mmspec AR vs HF generate",
            lossless=same("ours_ar"),
            speedup=seconds("hf_generate") / seconds("ours_ar"),
        ),
        Row(
            "bench: mmspec chain SD vs HF assisted",
            lossless=same("ours_sd"),
            tau=report["ours_sd_tau"],
            speedup=seconds("hf_assisted") / seconds("ours_sd"),
        ),
        Row(
            "bench: mmspec chain SD vs mmspec AR",
            lossless=same("ours_sd"),
            tau=report["ours_sd_tau"],
            speedup=eq1["decode_speedup"],
            eq1_ratio=eq1["decode_speedup"] / eq1["speedup_eq1"],
            verify_cost=eq1["verify_cost"],
        ),
    ]
    for row, name in zip(rows, ("ours_ar", "ours_sd", "ours_sd"), strict=True):
        if differ[name]:
            row.status = "FAIL"
            row.why = f"{name}'s output differs from HF greedy generate on {differ[name]} samples"
    return rows
