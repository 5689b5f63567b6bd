"""Our decoding engine vs Hugging Face `generate`, on the same Llava pair, samples and pixels.

Four runners (`engine_runners`), timed in one process on the same samples (greedy, batch 1):
mmspec AR against HF greedy `generate`, mmspec chain SD against HF assisted generation.

Fairness. The processor prepares every sample once, untimed; all runners start from its
pixel_values. Our time includes encoding the images with each model's own vision tower
(`visual.encode_images`), building the prompt embeddings (tokenising the text too, which HF gets
for free) and prefill, as `generate` runs the vision tower inside. Same max_new_tokens, same stop
tokens. Each runner is warmed up on 2 samples; then per sample the four run back to back in an
order rotated per sample, so drift in machine speed hits all alike.

All four are greedy on the same target, so outputs must match token for token: `passed` is
False (the command's exit status 1) if ours differ from HF greedy. Wall-clock times are noisy on
shared machines; quote the ratios. Run it as `python -m mmspec.bench.engine` or
`python benchmarks/bench_engine.py`; the GPU check calls `measure` in its own process.
"""

# ruff: noqa: E402  (HF_HUB_OFFLINE must be set before transformers is imported)
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field

import torch
from transformers.utils import logging as hf_logging

from mmspec.bench.engine_runners import RUNNERS, BenchError, Runners
from mmspec.decoding.timing import describe_device, pick_device, sync, versions
from mmspec.storage.tables import PREPARED, read_table


@dataclass
class Options:
    """What the benchmark runs; paths are relative to the working directory."""

    target: str = "results/models/toy/target"
    draft: str = "results/models/toy/draft"
    prepared: str = "results/prepared/toy_caption.parquet"
    gamma: int = 5
    samples: int = 40
    max_new_tokens: int = 48
    threads: int = 1
    warmup: int = 2


@dataclass
class Timings:
    """What the timed runs gave, summed over the samples."""

    seconds: dict = field(default_factory=lambda: dict.fromkeys(RUNNERS, 0.0))
    tokens: dict = field(default_factory=lambda: dict.fromkeys(RUNNERS, 0))
    mismatches: dict = field(  # samples whose output differs from hf_generate's
        default_factory=lambda: dict.fromkeys(["ours_ar", "ours_sd", "hf_assisted"], 0)
    )
    # decode only (no prefill), for Eq. 1: [seconds, new tokens, steps]
    decode: dict = field(default_factory=lambda: {"ours_ar": [0.0, 0, 0], "ours_sd": [0.0, 0, 0]})
    steps: list = field(default_factory=list)  # ours_sd's speculative steps


def measure(options: Options) -> dict:
    """Time the four runners on the prepared samples; the report (`summary` prints it)."""
    for path in (options.target, options.draft, options.prepared):
        # a relative or absolute path must exist; anything else is a hub id
        if path.startswith(("results/", "/", ".")) and not os.path.exists(path):
            raise BenchError(f"{path}: not found (train the toy models / prepare the data first)")
    with _threads_and_quiet_hf(options.threads):
        device = pick_device()
        runners = Runners(
            options.target, options.draft, options.gamma, options.max_new_tokens, device
        )
        rows = read_table(options.prepared, PREPARED).to_pylist()
        samples = [runners.sample(r) for r in rows][: options.samples]
        if not samples:
            raise BenchError(f"{options.prepared}: no samples")
        timings = _time(runners, samples, options.warmup, device)
        return _report(timings, runners, len(samples), options, device)


@contextlib.contextmanager
def _threads_and_quiet_hf(threads: int):
    """`threads` CPU threads and HF's warnings off, restored after: the GPU check runs more in
    the same process."""
    before = torch.get_num_threads(), hf_logging.get_verbosity()
    torch.set_num_threads(threads)
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        hf_logging.set_verbosity(before[1])


def _time(runners: Runners, samples: list[dict], warmup: int, device) -> Timings:
    def timed(name, s):
        sync(device)
        start = time.perf_counter()
        out = getattr(runners, name)(s)
        sync(device)
        return out, time.perf_counter() - start

    found = Timings()
    with torch.inference_mode():
        runners.check_assistant_view(samples[0])
        for s in samples[:warmup]:
            for name in RUNNERS:
                timed(name, s)
        runners.hf_target_forwards = 0
        runners.drafter.forwards, runners.drafter.forward_s = 0, 0.0
        for i, s in enumerate(samples):
            out = {}
            for name in RUNNERS[i % 4 :] + RUNNERS[: i % 4]:  # the order rotates per sample
                result, seconds = timed(name, s)
                if name == "ours_sd":
                    found.steps += result.steps
                if name.startswith("ours"):  # Eq. 1's T_p is an AR decoding step
                    found.decode[name][0] += result.decode_s
                    found.decode[name][1] += len(result.tokens) - 1
                    found.decode[name][2] += len(result.steps)
                out[name] = result.tokens if name.startswith("ours") else result
                found.seconds[name] += seconds
                found.tokens[name] += len(out[name])
            for name in found.mismatches:
                found.mismatches[name] += out[name] != out["hf_generate"]
    return found


def _report(timings: Timings, runners: Runners, samples: int, options: Options, device) -> dict:
    secs, toks, steps = timings.seconds, timings.tokens, timings.steps

    def ratio(a: str, b: str) -> float:
        return secs[a] / secs[b]

    # TABED's Eq. 1 from this run's own timings: c = T_q / T_p with T_p an AR decoding step
    (ar_s, ar_new, ar_steps), (sd_s, sd_new, sd_steps) = (
        timings.decode["ours_ar"],
        timings.decode["ours_sd"],
    )
    drafter = runners.drafter
    t_p = ar_s / ar_steps
    c = drafter.forward_s / drafter.forwards / t_p
    k = drafter.forwards / sd_steps
    tau = sd_new / sd_steps
    verify = sum(step.verify_s for step in steps) / sd_steps / t_p
    decode_speedup = (ar_s / ar_new) / (sd_s / sd_new)
    eq1 = {
        "c": c,
        "verify_cost": verify,
        "decode_speedup": decode_speedup,
        "speedup_eq1": tau / (k * c + 1),
        "speedup_eq1_verify": tau / (k * c + verify),
    }
    return {
        "runners": {
            n: {"seconds": secs[n], "tokens": toks[n], "tokens_per_s": toks[n] / secs[n]}
            for n in RUNNERS
        },
        "ratios": {
            "ours_ar / hf_generate": ratio("ours_ar", "hf_generate"),
            "ours_sd / hf_assisted": ratio("ours_sd", "hf_assisted"),
            "ours_sd speedup (ours_ar / ours_sd)": ratio("ours_ar", "ours_sd"),
            "hf_assisted speedup (hf_generate / hf_assisted)": ratio("hf_generate", "hf_assisted"),
            "ours_sd decode speedup / Eq. 1": decode_speedup / eq1["speedup_eq1"],
            "ours_sd decode speedup / Eq. 1 with verify_cost": (
                decode_speedup / eq1["speedup_eq1_verify"]
            ),
        },
        "eq1": eq1,
        "ours_sd_tau": sum(s.accepted + 1 for s in steps) / max(len(steps), 1),
        "tokens_per_target_forward": {  # ours: one prefill per sample + one per verification
            "ours_sd": toks["ours_sd"] / (samples + len(steps)),
            "hf_assisted": toks["hf_assisted"] / max(runners.hf_target_forwards, 1),
        },
        "mismatches_vs_hf_generate": timings.mismatches,
        "samples": samples,
        "args": asdict(options),
        "device": describe_device(device),
        "versions": json.loads(versions()),
    }


def passed(report: dict) -> bool:
    """mmspec's AR and chain SD gave HF greedy `generate`'s tokens on every sample."""
    mismatches = report["mismatches_vs_hf_generate"]
    return not (mismatches["ours_ar"] or mismatches["ours_sd"])


def summary(report: dict) -> str:
    """The report as the lines the command prints."""
    args, eq1, per_fwd = report["args"], report["eq1"], report["tokens_per_target_forward"]
    lines = [
        f"{report['samples']} samples, gamma {args['gamma']}, max_new_tokens "
        f"{args['max_new_tokens']}, {report['device']}",
        f"{'runner':<12} {'seconds':>9} {'tokens':>7} {'tokens/s':>9}",
    ]
    for n, r in report["runners"].items():
        lines.append(f"{n:<12} {r['seconds']:>9.3f} {r['tokens']:>7d} {r['tokens_per_s']:>9.1f}")
    lines += [f"{name:<48} {value:6.3f}" for name, value in report["ratios"].items()]
    lines += [
        f"ours_sd tau (mean accepted + 1 per verification): {report['ours_sd_tau']:.2f}",
        f"tokens per target forward: ours_sd {per_fwd['ours_sd']:.2f}, "
        f"hf_assisted {per_fwd['hf_assisted']:.2f}",
        f"Eq. 1: c {eq1['c']:.3f}, verify_cost {eq1['verify_cost']:.2f} AR steps, decode speedup "
        f"{eq1['decode_speedup']:.2f}, estimate {eq1['speedup_eq1']:.2f} (verification = 1 AR "
        f"step), {eq1['speedup_eq1_verify']:.2f} (its measured cost)",
        f"samples whose output differs from hf_generate: {report['mismatches_vs_hf_generate']}",
    ]
    return "\n".join(lines)


def write_json(report: dict, path: str | os.PathLike) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def main(argv: list[str] | None = None) -> int:
    """The command: measure, print, optionally write the JSON; 1 when ours differ from HF."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = Options()
    p.add_argument("--target", default=default.target)
    p.add_argument("--draft", default=default.draft)
    p.add_argument("--prepared", default=default.prepared)
    p.add_argument("--gamma", type=int, default=default.gamma)
    p.add_argument("--samples", type=int, default=default.samples)
    p.add_argument("--max-new-tokens", type=int, default=default.max_new_tokens)
    p.add_argument("--threads", type=int, default=default.threads)
    p.add_argument("--warmup", type=int, default=default.warmup)
    p.add_argument("--json", help="also write the numbers to this file")
    args = vars(p.parse_args(argv))
    json_path = args.pop("json")
    options = Options(**args)
    try:
        report = measure(options)
    except BenchError as error:
        sys.exit(str(error))
    print(summary(report))
    if json_path:
        write_json(report, json_path)
    return 0 if passed(report) else 1


if __name__ == "__main__":
    sys.exit(main())
