"""`mmspec gpu-check`: one command that checks a machine with a GPU end to end (docs/gpu-check.md).

Three parts, one table:
  workflow  the tour (config/config.yaml) and one sampled cell of every method family
            (config/gpu_check.yaml) in one Snakemake run under --out; `--keep-going`, so a
            failed job stops only the cells that need it
  bench     benchmarks/bench_engine.py on the sweep's trained toy pair: mmspec AR against HF
            greedy `generate`, mmspec chain SD against HF assisted generation, token for token
  dtypes    bfloat16 and float16 greedy SD against AR on tiny random models of two families
            (LLaVA, Qwen2.5-VL), through the generate stage's own loading and prompts

A cell passes when all its jobs ran (on the GPU, where this process sees one) and, for a lossless
rule at temperature 0, its output equals AR's on every sample-turn. Sampled cells cannot be
compared token for token: they pass when they ran, and their quality retention against the
sampled AR cell is shown (that rejection sampling keeps the target's distribution exactly is
`mmspec verify-lossless`'s proof). Low precision may flip a greedy token where AR's two best
logits tie within rounding (tests/test_dtypes.py): a dtype row passes when SD equals AR or first
leaves it at such a near-tie, and fails on any other difference. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from mmspec.scoring import lossless

REPO = Path(__file__).resolve().parents[2]
TOUR = REPO / "config" / "config.yaml"
SAMPLED = REPO / "config" / "gpu_check.yaml"
# --quick: the check's own smoke run, on the tiny sweep the workflow tests run
QUICK_CONFIG = REPO / "tests" / "configs" / "tiny.yaml"
QUICK_SAMPLED = REPO / "config" / "gpu_check_quick.yaml"
PARTS = ("workflow", "bench", "dtypes")
COLUMNS = ("cell", "status", "lossless", "tau", "speedup", "speedup / Eq. 1", "verify_cost")

DTYPE_FAMILIES = ("llava", "qwen2_5_vl")
DTYPES = ("bfloat16", "float16")
# (method, hyperparameters, draft): a 1-layer "small" draft of the family, or the target itself
DTYPE_METHODS = (
    ("sd_chain", {"gamma": 3}, "small"),
    ("sd_tree", {}, "small"),
    ("eagle2_tree", {}, "self"),
)
# A flip counts as rounding when SD's token lies within this many units in the last place of
# AR's best logit at that step (the sweep's own rule for bf16 and fp16, scoring.lossless)
TIE_ULPS = lossless.TIE_ULPS["bfloat16"]


@dataclass
class Settings:
    """What the check runs; `quick()` is its smoke run on the tiny sweep."""

    config: Path = TOUR  # a whole sweep, or an override of the tour
    sampled: Path | None = SAMPLED  # merged in, its sweep rules appended
    cores: str = "all"
    parts: tuple[str, ...] = PARTS
    bench_samples: int = 20
    bench_max_new: int = 48
    bench_warmup: int = 2
    dtype_samples: int = 12
    dtype_max_new: int = 24
    tie_ulps: float = TIE_ULPS

    @classmethod
    def quick(cls) -> Settings:
        small = dict(bench_samples=3, bench_max_new=12, bench_warmup=1, dtype_samples=3)
        return cls(config=QUICK_CONFIG, sampled=QUICK_SAMPLED, **small)


@dataclass
class Row:
    """One line of the table; `why` (printed under the table) says what failed and where to look."""

    cell: str
    status: str = "ok"
    lossless: str = ""
    tau: float | None = None
    speedup: float | None = None
    eq1_ratio: float | None = None  # measured speedup / Eq. 1's estimate
    verify_cost: float | None = None
    why: str = ""

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def cells(self) -> list[str]:
        numbers = (self.tau, self.speedup, self.eq1_ratio, self.verify_cost)
        return [self.cell, self.status, self.lossless, *map(_number, numbers)]


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


# ---------------------------------------------------------------------------------------------
# the sweep


def _mapping(path: Path) -> dict:
    from mmspec import config as mmconfig

    data = mmconfig.read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping of config keys")
    return data


def _explicit_rules(config: dict) -> list[dict]:
    """The config's sweep rules with every name list spelled out, so that methods merged in later
    do not join a rule that says "all" (or says nothing)."""
    rules = copy.deepcopy(config.get("sweep", [{}]))
    for rule in rules:
        for section in ("datasets", "pairs", "methods"):
            if rule.get(section, "all") == "all":
                rule[section] = list(config.get(section, {}))
    return rules


def sweep_config(config: Path, sampled: Path | None) -> dict:
    """The whole sweep the check runs: `config` (or the tour it overrides) with the sampled
    cells' file merged in as Snakemake merges a config file, except that its `sweep` rules are
    appended to the config's rather than replacing them."""
    from mmspec import config as mmconfig

    base = _mapping(config)
    if not mmconfig.is_whole_sweep(base):
        base = mmconfig.merge(_mapping(TOUR), base)
    if sampled is None:
        return base
    extra = _mapping(sampled)
    rules = _explicit_rules(base) + extra.pop("sweep", [])
    merged = mmconfig.merge(base, extra)
    merged["sweep"] = rules
    return merged


def cell_name(cell, repeated: set[tuple]) -> str:
    """dataset/pair/method, with the hyperparameter slug (and seed) only where a method entry
    has several cells."""
    name = f"{cell.dataset}/{cell.pair}/{cell.method}"
    if (cell.dataset, cell.pair, cell.method) in repeated:
        name += f" {cell.hp} seed {cell.seed}"
    return name


# ---------------------------------------------------------------------------------------------
# part 1: the workflow


@dataclass
class FailedJob:
    rule: str
    outputs: list[str]
    log: str


def failed_jobs(log: str) -> list[FailedJob]:
    """The jobs a Snakemake log reports as failed ("Error in rule ...:" blocks)."""
    jobs = []
    for match in re.finditer(r"^Error in rule (\w+):\n((?:[ \t]+.*\n?)+)", log, re.M):
        block = match[2]
        outputs = re.search(r"^\s+output: (.*)$", block, re.M)
        logs = re.search(r"^\s+log: (\S+)", block, re.M)
        jobs.append(
            FailedJob(
                match[1],
                [o.strip() for o in outputs[1].split(",")] if outputs else [],
                logs[1] if logs else "",
            )
        )
    return jobs


def run_workflow(out: Path, configfile: Path, cores: str, log: Path, echo) -> int:
    """Snakemake over the repository's Snakefile in `out`; its output goes to `log`, its
    progress and errors are echoed; its exit status."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", cores]
    cmd += ["--directory", str(out), "--configfile", str(configfile), "--keep-going"]
    if importlib.util.find_spec("pulp") is None:  # the ILP scheduler's solver is optional
        cmd += ["--scheduler", "greedy"]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    # the rules run `mmspec <stage>`: this interpreter's scripts first, as in its environment
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    with open(log, "w") as f:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        tenths = -1
        for line in proc.stdout:
            f.write(line)
            steps = re.match(r"(\d+) of (\d+) steps", line)
            if steps:  # progress every tenth of the jobs
                done = 10 * int(steps[1]) // int(steps[2])
                if done == tenths:
                    continue
                tenths = done
            if steps or line.startswith("Error in rule"):
                echo(f"  workflow: {line.rstrip()}")
        return proc.wait()


def cell_rows(out: Path, sweep: dict, status: int, log: str, expect_cuda: bool) -> list[Row]:
    """A row per cell of the validated `sweep` (done, failed or not run) and per failed job
    that belongs to no cell."""
    from mmspec import config as mmconfig

    cells = mmconfig.cells(sweep)
    jobs = failed_jobs(log)
    failed = {c.path for c in cells if any(f"/{c.path}/" in o for j in jobs for o in j.outputs)}
    results = _cells_table(out, [c for c in cells if c.path not in failed], status)
    keys = [(c.dataset, c.pair, c.method) for c in cells]
    repeated = {k for k in keys if keys.count(k) > 1}
    rows, claimed = [], set()
    for cell in cells:
        row = Row(cell_name(cell, repeated))
        mine = [j for j in jobs if any(f"/{cell.path}/" in o for o in j.outputs)]
        claimed.update(id(j) for j in mine)
        done = results.get((cell.dataset, cell.pair, cell.method, cell.hp, cell.seed))
        if mine:
            row.status, row.why = f"FAILED {mine[0].rule}", _job_error(out, mine[0])
        elif done is None:
            row.status = "NOT RUN"
            row.why = "a job it needs failed (below)" if status else "missing from the summary"
        else:
            row = judge_cell(row, done, expect_cuda)
        rows.append(row)
    for job in jobs:
        if id(job) not in claimed:
            what = ", ".join(job.outputs) or "?"
            rows.append(Row(f"job {job.rule} {what}", f"FAILED {job.rule}", _job_error(out, job)))
    if status and not jobs:
        why = f"snakemake exited {status}: {_tail(log)}"
        if "cannot be locked" in log:  # a killed run's lock, or another run in the folder
            why = (
                f"{out} is locked: if no other run uses it, `python -m snakemake -s "
                f"{REPO / 'Snakefile'} --directory {out} --configfile "
                f"{out / 'gpu_check' / 'config.yaml'} --unlock`, then the same command again"
            )
        rows.append(Row("workflow", "FAILED", why=why))
    return rows


def _job_error(out: Path, job: FailedJob) -> str:
    """Where a failed job's log is, and its last line (a stage's one-line error)."""
    if not job.log:
        return f"see {out / 'gpu_check' / 'workflow.log'}"
    log = out / job.log
    last = _tail(log.read_text(errors="replace"), 1) if log.exists() else ""
    return f"{last} (log: {log})" if last else f"see {log}"


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _cells_table(out: Path, cells, status: int) -> dict:
    """The cells table's rows by cell key: the workflow's summary after a clean run; after a
    failure (no summary then), those of `cells` whose score files exist, aggregated here."""
    from mmspec.stages import aggregate
    from mmspec.tables import CELLS, read_table

    summary = out / "results" / "summary" / "cells.parquet"
    if status != 0:
        scores = [out / "results" / "score" / c.path / "scores.parquet" for c in cells]
        scores = [str(s) for s in scores if s.exists()]
        if not scores:
            return {}
        summary = out / "gpu_check" / "cells.parquet"
        aggregate.run(scores, str(summary), str(out / "gpu_check" / "blocks.parquet"))
    elif not summary.exists():
        return {}
    rows = read_table(summary, CELLS).to_pylist()
    return {(r["dataset"], r["pair"], r["method"], r["hp"], r["seed"]): r for r in rows}


def judge_cell(row: Row, cell: dict, expect_cuda: bool) -> Row:
    """A finished cell's row: its numbers, and whether it passes (see the module docstring)."""
    row = replace(
        row,
        tau=cell["tau"],
        speedup=cell["speedup"],
        verify_cost=cell["verify_cost"],
        eq1_ratio=_ratio(cell["speedup"], cell["speedup_eq1"]),
    )
    greedy = cell["temperature"] == 0
    retention = cell["retention"] if cell["retention"] is not None else cell["fid_retention"]
    kept = "" if retention is None else f", retention {retention:.2f}"
    if retention is not None and cell["retention_low"] is not None:
        kept += f" [{_number(cell['retention_low'])}, {_number(cell['retention_high'])}]"
    if cell["registry_method"] == "ar":
        row.lossless = "AR" if greedy else "AR, sampled"
    elif not cell["lossless_rule"]:
        row.lossless = f"lossy{'' if greedy else ', sampled'}{kept}"
    elif greedy:
        rate, real = cell["lossless_rate"], cell.get("real_divergences")
        ties = cell.get("near_tie_divergences")
        row.lossless = _number(rate) if rate is None else f"{rate:.3f}"
        if ties:
            row.lossless += f", {int(ties)} near-tie(s)"
        if rate is None or (real > 0 if real is not None else rate < 1):
            row.status = "FAIL"
            divergence = cell["first_divergence_mean"]
            real = "some" if real is None else int(real)
            row.why = (
                f"acceptance {cell['acceptance']!r} is lossless and the cell greedy, and the "
                f"output equals AR's on a share {_number(rate)} of the sample-turns (mean first "
                f"divergence at token {_number(divergence)}), with {real} real divergence(s) "
                "beyond a rounding near-tie (positions and margins: divergence_positions, "
                "divergence_ulps in the cell's samples.parquet)"
            )
    else:
        row.lossless = f"sampled{kept}"
    if expect_cuda and not str(cell["device"]).startswith("cuda"):
        row.status, row.why = "FAIL", f"ran on {cell['device']}, not on the GPU"
    elif cell["tau"] is None or not cell["tau"] >= 1:
        row.status, row.why = "FAIL", f"tau {cell['tau']}: a step emits at least one token"
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return a / b


# ---------------------------------------------------------------------------------------------
# part 2: the engine benchmark


def bench_inputs(out: Path, sweep: dict) -> tuple[Path, Path, Path]:
    """(target, draft, prepared) of the first cell of the validated `sweep` that drafts with a
    toy draft model on a text dataset: the trained models and data the benchmark reads."""
    from mmspec import config as mmconfig
    from mmspec.data.media import IMAGE_GENERATION

    for cell in mmconfig.cells(sweep):
        pair = sweep["pairs"][cell.pair]
        refs = [pair["target"], pair.get("draft", "")]
        text = mmconfig.dataset_task(sweep, cell.dataset) != IMAGE_GENERATION
        if cell.spec["drafter"] == "model" and text and all(r.startswith("toy:") for r in refs):
            target, draft = (out / "results" / "models" / "toy" / r[4:] for r in refs)
            return target, draft, out / "results" / "prepared" / f"{cell.dataset}.parquet"
    raise ValueError("the sweep has no cell drafting with a toy draft model on a text dataset")


def bench_rows(out: Path, sweep: dict, settings: Settings, echo) -> list[Row]:
    """Run the engine benchmark; its three comparisons as rows."""
    folder = out / "gpu_check"
    try:
        target, draft, prepared = bench_inputs(out, sweep)
    except ValueError as e:
        return [Row("bench", "FAIL", why=str(e))]
    report, log = folder / "bench.json", folder / "bench.log"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_engine.py")]
    cmd += ["--target", str(target), "--draft", str(draft), "--prepared", str(prepared)]
    cmd += ["--samples", str(settings.bench_samples), "--warmup", str(settings.bench_warmup)]
    cmd += ["--max-new-tokens", str(settings.bench_max_new), "--json", str(report)]
    done = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr)
    echo(f"  bench: exit status {done.returncode} ({log})")
    if not report.exists():
        return [Row("bench", "FAILED", why=f"exit {done.returncode}: {_tail(done.stderr)}")]
    return bench_table(json.loads(report.read_text()), done.returncode)


def bench_table(report: dict, status: int) -> list[Row]:
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
    if status and not any(r.failed for r in rows):
        rows[0].status, rows[0].why = "FAILED", f"bench_engine.py exited {status}"
    return rows


# ---------------------------------------------------------------------------------------------
# part 3: low-precision greedy SD against AR


def divergence(ar: list[int], ours: list[int], logits: list, dtype) -> float:
    """How far SD's output strays from AR's: 0 when equal; else, at the first token where it
    leaves AR, the gap between AR's best logit and AR's logit of SD's token, in units in the last
    place of the best (inf when one output ends where the other goes on)."""
    from mmspec.scoring.lossless import first_divergence, margin_ulps

    where = first_divergence(ours, ar)
    if where is None:
        return 0.0
    if where >= min(len(ours), len(ar), len(logits)):
        return math.inf
    return margin_ulps(logits[where], ours[where], dtype)


class LogitRecorder:
    """A target `Decoder` that keeps the logits each AR step picks its token from."""

    def __init__(self, decoder):
        self._decoder, self.logits = decoder, []

    def __getattr__(self, name):
        return getattr(self._decoder, name)

    def prefill(self, *args, **kwargs):
        out = self._decoder.prefill(*args, **kwargs)
        self.logits.append(out.logits[0].detach().clone())
        return out

    def extend(self, *args, **kwargs):
        out = self._decoder.extend(*args, **kwargs)
        self.logits.append(out.logits[0, -1].detach().clone())
        return out


@dataclass
class Decoded:
    """What one method's greedy decodes of the dtype samples gave, against AR's."""

    gaps: list[float] = field(default_factory=list)  # per sample: `divergence`
    ar_repeatable: bool = True  # the timed AR run and the recorded one gave the same tokens
    seconds: dict = field(default_factory=lambda: {"ar": 0.0, "sd": 0.0, "verify": 0.0})
    tokens: dict = field(default_factory=lambda: {"ar": 0, "sd": 0})  # emitted after the first
    steps: dict = field(default_factory=lambda: {"ar": 0, "sd": 0})
    draft_forwards: int = 0
    draft_s: float = 0.0

    def add(self, ar, sd, recorded, logits, dtype) -> None:
        self.ar_repeatable &= recorded.tokens == ar.tokens
        self.gaps.append(divergence(recorded.tokens, sd.tokens, logits, dtype))
        for role, run in (("ar", ar), ("sd", sd)):
            self.seconds[role] += run.decode_s
            self.tokens[role] += len(run.tokens) - 1
            self.steps[role] += len(run.steps)
        self.seconds["verify"] += sum(step.verify_s for step in sd.steps)


def dtype_rows(folder: Path, settings: Settings, echo) -> list[Row]:
    """Tiny random models of each family, cached and decoded in each low-precision dtype."""
    from transformers.utils import logging as hf_logging

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    # the progress bars of every tiny model saved and cached would bury the check's own lines
    hf_logging.disable_progress_bar()
    with open(folder / "dtypes.log", "w") as log, contextlib.redirect_stderr(log):
        return _dtype_rows(folder, settings, echo)


def _dtype_rows(folder: Path, settings: Settings, echo) -> list[Row]:
    from mmspec.models import tiny
    from mmspec.stages import cache_visual, prepare

    prepared = folder / "prepared.parquet"
    prepare.run("toy_diff", {"source": "toy", "samples": settings.dtype_samples}, str(prepared), 0)
    rows = []
    for family in DTYPE_FAMILIES:
        models = {
            "target": tiny.save(family, folder / family / "target", seed=0),
            "small": tiny.save(family, folder / family / "draft", layers=1, seed=1),
        }
        for dtype in DTYPES:
            caches = {role: folder / family / f"{role}.{dtype}.parquet" for role in models}
            for role, path in models.items():
                cache_visual.run(str(path), str(prepared), str(caches[role]), dtype, 1)
            for method, hparams, draft in DTYPE_METHODS:
                role = "target" if draft == "self" else draft
                pair = {"target": str(models["target"]), "draft": str(models[role]), "dtype": dtype}
                inputs = (str(prepared), str(caches["target"]), str(caches[role]))
                decoded = decode_dtype(method, hparams, pair, inputs, settings.dtype_max_new)
                name = f"dtype {family} {dtype} {method}"
                rows.append(dtype_row(name, decoded, settings.tie_ulps))
            echo(f"  dtypes: {family} {dtype} done")
    return rows


def decode_dtype(method: str, hparams: dict, pair: dict, inputs: tuple, max_new: int) -> Decoded:
    """Each prepared sample decoded greedily by the method, by AR (timed), and by AR again with
    its logits kept, through the generate stage's own loading, prompts and runner."""
    import torch

    from mmspec.decoding.loops import decode_ar
    from mmspec.decoding.timing import pick_device
    from mmspec.methods.registry import resolve
    from mmspec.stages.generate import TextWork, sample_sampler
    from mmspec.stages.jobs import GenerateJob
    from mmspec.tables import PREPARED, read_table

    prepared, target_cache, draft_cache = inputs
    spec = dict(resolve(method, hparams), method=method, temperature=0.0)
    job = GenerateJob.parse(
        {
            "cell": {"dataset": "toy_diff", "pair": "tiny", "method": method, "spec": spec},
            "pair": pair,
            "generation": {"max_new_tokens": max_new, "temperature": 0.0},
            "timing": {"warmup_samples": 0, "threads": 1},
        }
    )
    work = TextWork(job, prepared, target_cache, draft_cache, None, pick_device())
    runner, dtype, out = work.runner, getattr(torch, pair["dtype"]), Decoded()
    rows = read_table(prepared, PREPARED).to_pylist()
    with torch.inference_mode():
        warm = work.sample(rows[0])  # the first kernels of each shape, untimed
        work.decode(warm, sample_sampler(0, "warmup", 0, "method"))
        work.decode_ar(warm, sample_sampler(0, "warmup", 0, "ar"))
        runner.reset_stats()
        for row in rows:
            sample = work.sample(row)
            key = (0, row["sample_id"], row["turn"])
            ar = work.decode_ar(sample, sample_sampler(*key, "ar"))
            sd = work.decode(sample, sample_sampler(*key, "method"))
            recorder = LogitRecorder(runner.target)
            prompt = runner.target_prompt(sample)
            recorded = decode_ar(recorder, prompt, work.max_new, work.stop, 0.0, None)
            out.add(ar, sd, recorded, recorder.logits, dtype)
    out.draft_forwards, out.draft_s = runner.draft_forward_stats()
    return out


def dtype_row(name: str, decoded: Decoded, tie_ulps: float) -> Row:
    """Equal, or leaving AR only at near-ties (pass, counted), or a real difference (fail);
    tau, speedup and Eq. 1 pooled over the samples as the cells table pools them."""
    gaps = decoded.gaps
    ties = [g for g in gaps if 0 < g <= tie_ulps]
    real = [g for g in gaps if g > tie_ulps]
    row = Row(name, lossless=f"{gaps.count(0.0)}/{len(gaps)} ==AR")
    if ties:
        row.lossless += f", {len(ties)} at ties (<= {max(ties):.1f} ulp)"
    if real:
        row.lossless += f", {len(real)} differ"
        row.status = "FAIL"
        row.why = (
            f"{len(real)} sample(s) leave AR where SD's token is {min(real):.1f} or more units in "
            f"the last place below AR's best logit (a near-tie is <= {tie_ulps:g})"
        )
    if not decoded.ar_repeatable:
        row.status, row.why = "FAIL", "two AR runs of the same sample gave different tokens"
    steps, tokens, seconds = decoded.steps, decoded.tokens, decoded.seconds
    if steps["sd"] and tokens["sd"] and steps["ar"] and tokens["ar"]:
        row.tau = tokens["sd"] / steps["sd"]
        row.speedup = (seconds["ar"] / tokens["ar"]) / (seconds["sd"] / tokens["sd"])
        t_p = seconds["ar"] / steps["ar"]
        row.verify_cost = seconds["verify"] / steps["sd"] / t_p
        if decoded.draft_forwards:
            c = decoded.draft_s / decoded.draft_forwards / t_p
            k = decoded.draft_forwards / steps["sd"]
            row.eq1_ratio = row.speedup / (row.tau / (k * c + 1))
    return row


# ---------------------------------------------------------------------------------------------
# the table and the command


def table(rows: list[Row]) -> str:
    """The rows as one aligned text table."""
    lines = [list(COLUMNS)] + [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    text = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in text)


def markdown(rows: list[Row], header: list[str]) -> str:
    """The rows as a Markdown table, with the header lines and the failures under it."""
    out = [*header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(v.replace("|", "/") for v in row.cells()) + " |" for row in rows]
    failures = [f"- {row.cell}: {row.status}: {row.why}" for row in rows if row.failed]
    return "\n".join(out + ([""] + failures if failures else [])) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def describe_device() -> tuple[str, bool]:
    """The GPU this process sees (or the CPU), and whether there is one."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})", True
    return f"CPU only: no GPU visible to torch {torch.__version__}", False


def run(out: str | Path, settings: Settings | None = None, echo=print) -> int:
    """Run the check's parts under `out`; print and write (out/gpu_check/table.md) the table;
    0 when every row passes, else 1."""
    import yaml

    from mmspec import config as mmconfig

    settings = settings or Settings()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers: nothing downloads
    unknown = set(settings.parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)} (known: {', '.join(PARTS)})")
    if not (REPO / "Snakefile").exists():  # an installed copy without the workflow
        raise FileNotFoundError(
            f"{REPO}: no Snakefile; run the check from a clone (pip install -e .)"
        )
    config = sweep_config(Path(settings.config), settings.sampled and Path(settings.sampled))
    sweep = mmconfig.validate(copy.deepcopy(config), overrides={})  # before any job
    out = Path(out).resolve()
    folder = out / "gpu_check"
    folder.mkdir(parents=True, exist_ok=True)
    configfile = folder / "config.yaml"
    _write(configfile, yaml.safe_dump(config, sort_keys=False))
    device, cuda = describe_device()
    echo(f"gpu-check: {device}; results under {out}")
    rows, timings = [], []
    for part in (p for p in PARTS if p in settings.parts):
        started = time.perf_counter()
        echo(f"gpu-check: {part} ...")
        if part == "workflow":
            log = folder / "workflow.log"
            status = run_workflow(out, configfile, settings.cores, log, echo)
            rows += cell_rows(out, sweep, status, log.read_text(), cuda)
        elif part == "bench":
            rows += bench_rows(out, sweep, settings, echo)
        else:
            rows += dtype_rows(folder / "dtypes", settings, echo)
        timings.append(f"{part} {time.perf_counter() - started:.0f} s")
    return report(rows, [f"device: {device}", f"time: {', '.join(timings)}"], folder, echo)


def report(rows: list[Row], header: list[str], folder: Path, echo) -> int:
    """Print the table and its failures, write it to folder/table.md; the exit status."""
    failed = [row for row in rows if row.failed]
    verdict = f"{len(failed)} of {len(rows)} rows failed" if failed else f"all {len(rows)} passed"
    header = [*header, f"result: {verdict}"]
    _write(folder / "table.md", markdown(rows, header))
    echo("")
    echo(table(rows))
    echo("")
    for row in failed:
        echo(f"FAIL {row.cell}: {row.status}: {row.why}")
    for line in header:
        echo(line)
    echo(f"table: {folder / 'table.md'}")
    return 1 if failed else 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command's options (`mmspec gpu-check` and `python -m mmspec.gpu_check`)."""
    p.add_argument(
        "--out", help="the run's folder (default: gpu-check, or gpu-check-quick with --quick)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the check's smoke run: the tiny sweep (tests/configs/tiny.yaml) with "
        "config/gpu_check_quick.yaml, few benchmark and dtype samples (about a minute on 2 CPU "
        "cores)",
    )
    p.add_argument("--config", help="the sweep (default: config/config.yaml, the tour)")
    p.add_argument(
        "--sampled",
        help="the sampled cells merged into the sweep (default: config/gpu_check.yaml); "
        "'none' for none",
    )
    p.add_argument("--cores", default="all", help="Snakemake's --cores (default: all)")
    p.add_argument(
        "--skip", action="append", default=[], choices=PARTS, help="leave a part out (repeatable)"
    )
    p.add_argument("--bench-samples", type=int, help="captions the benchmark decodes (20)")
    p.add_argument("--dtype-samples", type=int, help="samples per dtype check (12)")
    p.add_argument(
        "--tie-ulps",
        type=float,
        help=f"how close (units in the last place) AR's best two logits must be for a "
        f"low-precision flip to count as rounding (default {TIE_ULPS:g})",
    )


def out_of(args: argparse.Namespace) -> str:
    """The run's folder: the quick run has its own, so that it never retrains the tour's models."""
    return args.out or ("gpu-check-quick" if args.quick else "gpu-check")


def settings_of(args: argparse.Namespace) -> Settings:
    settings = Settings.quick() if args.quick else Settings()
    given = {
        "config": args.config and Path(args.config),
        "cores": args.cores,
        "bench_samples": args.bench_samples,
        "dtype_samples": args.dtype_samples,
        "tie_ulps": args.tie_ulps,
    }
    settings = replace(settings, **{k: v for k, v in given.items() if v is not None})
    if args.sampled:
        settings.sampled = None if args.sampled == "none" else Path(args.sampled)
    settings.parts = tuple(p for p in PARTS if p not in args.skip)
    return settings


def from_args(args: argparse.Namespace) -> int:
    """Run the check as its command line asks; the exit status."""
    return run(out_of(args), settings_of(args))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mmspec gpu-check", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return from_args(args)
    except (ValueError, FileNotFoundError) as error:  # a bad config or folder: one line
        print(f"mmspec gpu-check: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
