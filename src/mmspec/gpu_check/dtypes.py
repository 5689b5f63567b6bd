"""Part 3, low precision: bfloat16 and float16 greedy SD against AR on tiny random models of two
families (LLaVA, Qwen2.5-VL), through the generate stage's own loading, prompts and runner."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from mmspec.gpu_check.dtype_verdict import Decoded, dtype_row
from mmspec.gpu_check.logit_recorder import LogitRecorder
from mmspec.gpu_check.row import Row
from mmspec.gpu_check.settings import Settings

DTYPE_FAMILIES = ("llava", "qwen2_5_vl")
DTYPES = ("bfloat16", "float16")
# (method, hyperparameters, draft): a 1-layer "small" draft of the family, or the target itself
DTYPE_METHODS = (
    ("sd_chain", {"gamma": 3}, "small"),
    ("sd_tree", {}, "small"),
    ("eagle2_tree", {}, "self"),
)


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
    from mmspec.stages import cache_visual, prepare
    from mmspec.toy import tiny

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
    from mmspec.storage.tables import PREPARED, read_table
    from mmspec.sweep.jobs import GenerateJob

    prepared, target_cache, draft_cache = inputs
    spec = resolve(method, hparams).to_dict()  # greedy: temperature 0
    job = GenerateJob.parse(
        {
            "cell": {"dataset": "toy_diff", "pair": "tiny", "method": method, "spec": spec},
            "pair": pair,
            "generation": {"max_new_tokens": max_new},
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
