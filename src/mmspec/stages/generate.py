"""Stage generate: decode every sample-turn of one cell, and time AR beside each one briefly.

The AR cell of the cell's (dataset, pair, seed, temperature) decodes every sample-turn once with
AR. A method's job times AR on its own device under its own load with a probe per sample-turn:
AR's first `timing.ar_probe_tokens` steps, right after the method's decode of it and from the
prompt that decode read (no prefill of its own), so drift in machine speed hits both alike;
warm-up samples come first, decoded but not recorded. The cell's speedup scales the AR cell's
time of every sample-turn by the ratio of the probes' step times to the AR cell's own times of
the same steps (stages/aggregate.py): the AR cell carries the lengths, the probes this job's
device and load. `timing.ar_reference: full` decodes every sample-turn with AR in full instead,
back to back with the method in alternating order (full pairing).

A greedy cell of a lossless rule whose output differs from the AR cell's (`ar_samples`) is
checked against the target on the job's own device (`scoring.lossless`): the target reads the
output one token at a time, and every position where its argmax is not the output's token is
kept with AR's margin there.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import time
from pathlib import Path

import pyarrow as pa
import torch
from PIL import Image
from tqdm import tqdm

from mmspec.data import media
from mmspec.decoding.component import DRAFT_MODEL, TRAINED_HEAD
from mmspec.decoding.drafters.heads import load_head
from mmspec.decoding.sampler import TorchSampler, seeded
from mmspec.decoding.timing import describe_device, pick_device, versions
from mmspec.decoding.views import Chat, ImageInput
from mmspec.methods.image_runner import ImageMethodRunner
from mmspec.methods.runtime import MethodRunner, Sample
from mmspec.models import families, loading, visual
from mmspec.models.image_generation import ImageGenerator
from mmspec.scoring.lossless import margin_ulps, tie_ulps
from mmspec.stages.checkpoints import Checkpoints, job_key, one_writer
from mmspec.storage import integrity
from mmspec.storage.tables import CAPTIONS, PREPARED, SAMPLES, VISUAL, read_table, write_table
from mmspec.sweep.arguments import json_object
from mmspec.sweep.jobs import GenerateJob

HELP = "decode one cell"
GPU = True
WARM = True

CHUNK = 8  # samples per checkpoint: a killed job loses at most this many


def sample_sampler(seed: int, sample_id: str, turn: int, stream: str) -> TorchSampler:
    """A sampler seeded by (seed, sample, turn, stream): reruns draw the same numbers."""
    key = f"{seed}/{sample_id}/{turn}/{stream}".encode()
    return seeded(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))


def stop_tokens(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def check_shared_vocabulary(what: str, target_tokenizer, draft_tokenizer) -> None:
    """Speculative decoding compares token ids: the draft must share the target's tokenizer."""
    t_vocab, d_vocab = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    if t_vocab != d_vocab:
        raise ValueError(
            f"{what}: the draft's tokenizer ({len(d_vocab)} tokens) differs from the target's "
            f"({len(t_vocab)} tokens); speculative decoding needs a shared tokenizer"
        )


def reads_videos(model) -> bool:
    """Whether a model reads a video item as a video (its family's own video path)."""
    if not hasattr(model.config, "vision_config"):
        return False
    return families.family_of(model).video is not None


def _lookup(cache: dict, ids: list[str], path: str, what: str) -> list:
    missing = [i for i in ids if i not in cache]
    if missing:
        raise KeyError(
            f"{path}: no cached {what} for images or videos {missing[:3]} (rerun its stage)"
        )
    return [cache[i] for i in ids]


class ImageStore:
    """Cached image data of one model (visual cache, optionally features and captions)."""

    def __init__(self, visual_path=None, features=False, captions_path=None):
        self.visual_path, self.captions_path = visual_path, captions_path
        self.embeds, self.features, self.captions, self.caption_s = {}, {}, {}, {}
        if visual_path:
            table = read_table(visual_path, VISUAL)
            self.embeds = visual.load_cache(table)
            if features:
                self.features = visual.load_cache(table, "features")
        if captions_path:
            table = read_table(captions_path, CAPTIONS).to_pylist()
            self.captions = {r["image_id"]: r["caption"] for r in table}
            self.caption_s = {r["image_id"]: r["caption_s"] for r in table}

    def inputs(self, items: list[media.Item], pngs: dict[str, bytes]) -> list[ImageInput]:
        """The cached data of a sample's images and videos (`items`), with the pictures
        themselves decoded from `pngs` (picture id -> PNG)."""
        keys = [item.key for item in items]
        embeds = _lookup(self.embeds, keys, self.visual_path, "embeddings") if self.embeds else []
        feats = _lookup(self.features, keys, self.visual_path, "features") if self.features else []
        out = []
        for k, item in enumerate(items):
            pils = [Image.open(io.BytesIO(pngs[i])).convert("RGB") for i in item.ids]
            captions = None
            if self.captions:
                captions = _lookup(self.captions, list(item.ids), self.captions_path, "captions")
            video = item.kind == media.VIDEO
            out.append(
                ImageInput(
                    embeds[k] if embeds else None,
                    feats[k] if feats else None,
                    (captions if video else captions[0]) if captions else None,
                    image=None if video else pils[0],
                    frames=pils if video else None,
                )
            )
        return out

    def captioning_s(self, ids: list[str]) -> float:
        return sum(self.caption_s.get(i, 0.0) for i in ids)


class TextWork:
    """A cell over prompts with images: the method runner and how a prepared row decodes."""

    def __init__(
        self,
        job: GenerateJob,
        prepared,
        target_visual,
        draft_visual,
        captions,
        device,
        drafter=None,
    ):
        pair, method = job.pair, job.spec
        with loading.about(pair.target):
            processor = loading.load_processor(pair.target)
            target_model = loading.load_model(
                pair.target, device, pair.dtype, device_map=pair.target_device_map
            )
        self.tokenizer = tokenizer = loading.tokenizer_of(processor)
        draft_model = draft_processor = None
        if method.needs(DRAFT_MODEL) and pair.self_draft:
            # Self-SD: the target drafts for itself (from the view the method names, e.g. S's
            # pruned visual tokens); one copy of the weights, each role its own KV cache
            draft_model, draft_processor = target_model, processor
        elif method.needs(DRAFT_MODEL):
            with loading.about(pair.draft):
                draft_model = loading.load_model(
                    pair.draft, loading.input_device(target_model), pair.dtype
                )
                draft_processor = loading.load_processor(pair.draft)
            check_shared_vocabulary(
                f"pair {job.pair_name}", tokenizer, loading.tokenizer_of(draft_processor)
            )
        head = None
        if method.needs(TRAINED_HEAD):
            if drafter is None:
                raise ValueError(f"method {job.method!r} needs its trained head (--drafter)")
            device = loading.input_device(target_model)
            integrity.verify_folder(drafter)
            head = load_head(drafter, pair.target, device, target_model.dtype, method.drafter)
        image_token = loading.image_token_of(processor)
        self.runner = MethodRunner(
            method,
            target_model,
            draft_model,
            tokenizer,
            image_token,
            processor,
            draft_processor,
            head=head,
        )
        self.stop = stop_tokens(target_model, tokenizer)
        self.dtype = target_model.dtype  # the precision AR's margins are counted in
        self.max_new = job.generation.max_new_tokens
        self.target_store = ImageStore(target_visual)
        self.draft_store = ImageStore(draft_visual, "P" in (method.views or ""), captions)
        self.processor, self.prepared = processor, prepared
        self.target_videos = reads_videos(target_model)
        self.draft_videos = draft_model is not None and reads_videos(draft_model)
        self.drafted = draft_model is not None

    def sample(self, row: dict) -> Sample:
        messages = json.loads(row["messages"])
        builder = self.runner.target_ctx.builder
        if builder is not None:  # the family's chat, videos as it reads them
            text = builder.render(messages)
        else:
            shown = media.frames_as_images(messages)
            text = self.processor.apply_chat_template(
                shown, add_generation_prompt=True, tokenize=False
            )
        ids, pngs = row["image_ids"], dict(zip(row["image_ids"], row["images"], strict=True))
        where = f"{self.prepared}: sample {row['sample_id']} turn {row['turn']}"
        items = lambda videos: media.items(messages, ids, videos, where)  # noqa: E731
        return Sample(
            Chat(text, messages),
            self.target_store.inputs(items(self.target_videos), pngs),
            self.draft_store.inputs(items(self.draft_videos), pngs) if self.drafted else [],
        )

    def decode(self, sample: Sample, sampler):
        return self.runner.decode(sample, self.max_new, self.stop, sampler)

    def decode_ar(self, sample: Sample, sampler):
        return self.runner.decode_ar(sample, self.max_new, self.stop, sampler)

    def probe_ar(self, sample: Sample, first_token: int, steps: int, sampler):
        steps = min(steps, self.max_new - 1)
        return self.runner.probe_ar(sample, first_token, steps, sampler)

    def argmax_misses(self, sample: Sample, tokens: list[int]) -> list:
        return self.runner.argmax_misses(sample, tokens)

    def caption_s(self, row: dict) -> float:
        return self.draft_store.captioning_s(row["image_ids"])

    def outputs(self, ids: list[int]) -> dict:
        """What a sample's output ids are written as, besides the ids."""
        return {"output_text": self.tokenizer.decode(ids, skip_special_tokens=True)}


class ImageWork:
    """A cell of image generation: each prepared row's caption in, a grid of codes out, with
    classifier-free guidance at `generation.cfg` on target and draft."""

    def __init__(self, job: GenerateJob, prepared, out, device, drafter=None):
        pair, method = job.pair, job.spec
        with loading.about(pair.target):
            target = ImageGenerator.load(pair.target, device, pair.dtype)
        draft = head = None
        if method.needs(DRAFT_MODEL):
            with loading.about(pair.draft):
                draft = ImageGenerator.load(pair.draft, device, pair.dtype)
        if method.needs(TRAINED_HEAD):
            if drafter is None:
                raise ValueError(f"method {job.method!r} needs its trained head (--drafter)")
            dtype = target.model.dtype
            integrity.verify_folder(drafter)
            head = load_head(drafter, pair.target, device, dtype, method.drafter)
        gen = job.generation
        self.runner = ImageMethodRunner(method, target, draft, gen.cfg, gen.top_k, head=head)
        self.generator, self.out = target, out  # `out`: the table errors name
        self.stop, self.max_new = set(), self.runner.grid  # an image is a full grid of codes
        self.dtype = target.model.dtype  # the precision AR's margins are counted in
        self.prepared = prepared

    def sample(self, row: dict):
        where = f"{self.prepared}: sample {row['sample_id']}"
        return self.runner.prompt(media.prompt_text(json.loads(row["messages"]), where))

    def decode(self, prompt, sampler):
        return self.runner.decode(prompt, sampler)

    def decode_ar(self, prompt, sampler):
        return self.runner.decode_ar(prompt, sampler)

    def probe_ar(self, prompt, first_code: int, steps: int, sampler):
        return self.runner.probe_ar(prompt, first_code, steps, sampler)

    def argmax_misses(self, prompt, codes: list[int]) -> list:
        return self.runner.argmax_misses(prompt, codes)

    def caption_s(self, row: dict) -> float:
        return 0.0

    def outputs(self, ids: list[int]) -> dict:
        """The image as PNG, decoded by the target's own VQ decoder (no text)."""
        image = self.generator.images([ids], self.out)[0]
        return {"output_text": "", "image_png": media.png_bytes(image)}


def run(
    job: GenerateJob | dict,
    prepared: str,
    target_visual: str | None,
    draft_visual: str | None,
    out: str,
    captions: str | None = None,
    chunk: int | None = None,
    drafter: str | None = None,
    ar_samples: str | None = None,
):
    """Decode every sample-turn of one cell into `out`; finished samples are checkpointed every
    `chunk` samples, and a rerun of the same job resumes after the last checkpoint. `job`: the
    GenerateJob, or its JSON's dict; `ar_samples`: the AR cell's samples, the greedy lossless
    check's reference (none for an AR cell, or for no check). One process writes a cell at a
    time (`checkpoints.one_writer`)."""
    with one_writer(out):
        _decode_cell(
            job, prepared, target_visual, draft_visual, out, captions, chunk, drafter, ar_samples
        )


def _decode_cell(
    job, prepared, target_visual, draft_visual, out, captions, chunk, drafter, ar_samples
) -> None:
    job = GenerateJob.parse(job)
    timing = job.timing
    torch.set_num_threads(timing.threads)
    device = pick_device()
    rows = read_table(prepared, PREPARED).to_pylist()
    if not rows:
        raise ValueError(f"{prepared}: no samples to decode")
    if job.task == media.IMAGE_GENERATION:
        work = ImageWork(job, prepared, out, device, drafter)
    else:
        if target_visual is None:
            raise ValueError(f"cell {job.dataset}: a visual cache of the target is needed")
        work = TextWork(job, prepared, target_visual, draft_visual, captions, device, drafter)
    runner = work.runner
    reference = read_ar_cell(ar_samples, rows, prepared) if ar_samples else None
    own_ar = runner.drafter is None  # an AR cell: its own decode is the AR timing
    full = timing.ar_reference == "full"
    checked = reference is not None and not own_ar and job.spec.temperature == 0
    checked = checked and job.spec.lossless

    def decode(sample, key: tuple, index: int):
        """The method's decode of a sample-turn and the job's AR run of it: the AR cell's is its
        own decode; a probe of AR's first steps right after the method's (from the prompt its
        decode read); or, in full, AR's whole decode back to back, in alternating order."""
        # the AR cell's own stream: on the same device AR here decodes the AR cell's tokens
        method = lambda: work.decode(sample, sample_sampler(*key, "method"))  # noqa: E731
        if own_ar:
            result = method()
            return result, result
        if not full:
            result = method()
            sampler = sample_sampler(*key, "probe")
            return result, work.probe_ar(sample, result.tokens[0], timing.ar_probe_tokens, sampler)
        ar = lambda: work.decode_ar(sample, sample_sampler(*key, "method"))  # noqa: E731
        if index % 2 == 0:
            return method(), ar()
        ar_run = ar()
        return method(), ar_run

    for row in rows[: timing.warmup_samples]:
        decode(work.sample(row), (job.seed, "warmup", 0), 0)
    runner.reset_stats()

    chunk = chunk or CHUNK
    checkpoints = Checkpoints(
        out,
        job_key(
            job.to_dict(),
            prepared,
            target_visual,
            draft_visual,
            captions,
            ar_samples,
            *_head_files(drafter),
        ),
    )
    records, counters = checkpoints.load()
    chunk_start = len(records)
    chunk_ar = {"ar_decode_s": 0.0, "ar_forwards": 0}
    progress = tqdm(total=len(rows), initial=len(records), desc=f"generate {job.method} {job.hp}")
    for i in range(len(records), len(rows)):
        row = rows[i]
        sample = work.sample(row)
        key = (job.seed, row["sample_id"], row["turn"])
        result, ar = decode(sample, key, i)
        chunk_ar["ar_decode_s"] += ar.decode_s
        chunk_ar["ar_forwards"] += len(ar.steps)
        records.append(_record(row, result, ar, runner))
        records[-1]["caption_s"] = work.caption_s(row)
        reference_tokens = reference[i]["output_ids"] if checked else None
        records[-1].update(divergences(work, sample, result.tokens, reference_tokens))
        progress.update()
        if len(records) - chunk_start == chunk or len(records) == len(rows):
            forwards, forward_s = runner.draft_forward_stats()
            counters.append({**chunk_ar, "draft_forwards": forwards, "draft_forward_s": forward_s})
            checkpoints.save(chunk_start, records[chunk_start:], counters[-1])
            runner.reset_stats()
            chunk_start, chunk_ar = len(records), {"ar_decode_s": 0.0, "ar_forwards": 0}
    progress.close()

    probed = reference is not None and not full and not own_ar
    columns = _cell_columns(job, runner, device, records, counters, reference if probed else None)
    for record in records:
        record.update(work.outputs(record["output_ids"]))  # after timing: never timed
        record.update(columns)
    write_table(pa.Table.from_pylist(records, schema=SAMPLES), out, SAMPLES)
    checkpoints.clear()


def _cell_columns(job: GenerateJob, runner, device, records, counters, probed) -> dict:
    """The columns every sample-turn row of the cell shares: its identity and method, the
    timing model's T_q and T_p, the device and versions. `probed`: the AR cell's samples where
    this job timed AR by probes (their T_p is the AR cell's, scaled to this job)."""

    def total(name):
        return sum(c[name] for c in counters)

    ar_decode_s, ar_forwards = total("ar_decode_s"), total("ar_forwards")
    forwards, forward_s = total("draft_forwards"), total("draft_forward_s")
    n_steps = sum(len(r["step_accepted"]) for r in records) if runner.drafter else 0
    t_q = forward_s / forwards if forwards else math.nan
    t_p = ar_decode_s / ar_forwards if ar_forwards else math.nan
    if probed is not None:
        # the probes time AR's first steps only: T_p is the AR cell's mean step over whole
        # decodes, scaled to this job by the probes (as the speedup's AR time is)
        t_p = probed_step_time(records, probed)
    return {
        "t_q_s": t_q,
        "draft_forwards_per_step": forwards / n_steps if n_steps else math.nan,
        "t_p_s": t_p,
        "device": describe_device(device),
        "versions": versions(),
        "dataset": job.dataset,
        "pair": job.pair_name,
        "method": job.method,
        "hp": job.hp,
        "seed": job.seed,
        "hparams": json.dumps(job.spec.to_dict(), sort_keys=True),
        **runner.method.columns(),
    }


def _head_files(drafter: str | None) -> list[str]:
    """The files of a trained head that a checkpoint's key covers (a retrained head's cell
    never resumes from checkpoints of the old head)."""
    if drafter is None:
        return []
    return [str(p) for p in sorted(Path(drafter).glob("*.safetensors"))]


def read_ar_cell(path: str, rows: list[dict], prepared: str) -> list[dict]:
    """The AR cell's samples in the order of the prepared `rows`; ValueError naming a sample
    the AR cell lacks."""
    found = {(r["sample_id"], r["turn"]): r for r in read_table(path, SAMPLES).to_pylist()}
    missing = [
        (r["sample_id"], r["turn"]) for r in rows if (r["sample_id"], r["turn"]) not in found
    ]
    if missing:
        raise ValueError(
            f"{path}: the AR cell has no sample {missing[0][0]} turn {missing[0][1]} of "
            f"{prepared} ({len(missing)} missing): rerun the AR cell's generate job"
        )
    return [found[(r["sample_id"], r["turn"])] for r in rows]


def divergences(work, sample, tokens: list[int], reference: list[int] | None) -> dict:
    """The lossless check's columns of one sample-turn: nothing to check where there is no
    reference (null) or the output equals it; else the positions where the target's own argmax
    on the job's device is not the output's token, with AR's margin there (`scoring.lossless`)."""
    if reference is None or tokens == reference:
        return {
            "divergence_positions": None,
            "divergence_ulps": None,
            "tie_ulps": None,
            "check_s": 0.0,
        }
    start = time.perf_counter()
    with torch.inference_mode():
        misses = work.argmax_misses(sample, tokens)
    positions = [i for i, _ in misses]
    ulps = [margin_ulps(logits, tokens[i], work.dtype) for i, logits in misses]
    end = misplaced_end(tokens, work.stop, work.max_new)
    if end is not None:  # AR ends elsewhere, whatever the logits: no rounding explains it
        positions.append(end)
        ulps.append(math.inf)
    return {
        "divergence_positions": positions,
        "divergence_ulps": ulps,
        "tie_ulps": tie_ulps(work.dtype),
        "check_s": time.perf_counter() - start,
    }


def probed_step_time(records: list[dict], reference: list[dict]) -> float:
    """AR's mean step time on this job's device and load: the AR cell's mean over all its
    steps, times the ratio of the probes' steps to the AR cell's same steps."""
    probe = cell = 0.0
    for record, ar in zip(records, reference, strict=True):
        steps = ar["step_verify_s"] or []
        n = min(len(record["ar_step_s"]), len(steps))
        probe += sum(record["ar_step_s"][:n])
        cell += sum(steps[:n])
    every = [t for ar in reference for t in ar["step_verify_s"] or []]
    if not cell or not every:
        return math.nan
    return probe / cell * sum(every) / len(every)


def misplaced_end(tokens: list[int], stop: set[int], max_new: int) -> int | None:
    """Where an output's end is not where AR's would be, or None: a token after a stop token
    (AR stops there), or an end before `max_new` tokens without one (AR goes on)."""
    for i, token in enumerate(tokens[:-1]):
        if token in stop:
            return i + 1
    if len(tokens) < max_new and (not tokens or tokens[-1] not in stop):
        return len(tokens)
    return None


def _record(row: dict, result, ar, runner: MethodRunner) -> dict:
    return {
        "sample_id": row["sample_id"],
        "turn": row["turn"],
        "output_ids": result.tokens,
        "n_tokens": len(result.tokens),
        "step_drafted": [s.drafted for s in result.steps],
        "step_accepted": [s.accepted for s in result.steps],
        "step_draft_s": [s.draft_s for s in result.steps],
        "step_verify_s": [s.verify_s for s in result.steps],
        "step_weights": [list(s.weights) for s in result.steps],
        "step_depth": [s.depth for s in result.steps],
        "step_width": [s.width for s in result.steps],
        "step_relaxed": [s.relaxed for s in result.steps],
        "prefill_s": result.prefill_s,
        "decode_s": result.decode_s,
        "ar_prefill_s": ar.prefill_s,
        "ar_decode_s": ar.decode_s,
        "ar_n_tokens": len(ar.tokens),
        "ar_step_s": [s.verify_s for s in ar.steps],
        "draft_visual_tokens": runner.last_draft_visual,
        "target_visual_tokens": runner.last_target_visual,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params", type=json_object, required=True, help="cell, pair, generation, timing"
    )
    parser.add_argument("--prepared", required=True)
    parser.add_argument(
        "--target-visual", default=None, help="the target's visual cache (not for image generation)"
    )
    parser.add_argument("--draft-visual", default=None)
    parser.add_argument("--captions", default=None, help="the caption cache (views with C)")
    parser.add_argument("--drafter", default=None, help="the trained head (head drafters)")
    parser.add_argument(
        "--ar-samples",
        default=None,
        help="the AR cell's samples (a method cell's; none for the AR cell itself): the greedy "
        "lossless check's reference; the speedup's AR timing is that cell's decode, scaled by "
        "the AR probe run here (timing.ar_reference, timing.ar_probe_tokens)",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=int(os.environ.get("MMSPEC_CHECKPOINT_EVERY", "0")) or None,
        help="samples per checkpoint; a killed job resumes after the last one "
        "(default $MMSPEC_CHECKPOINT_EVERY, else generate.CHUNK = 8)",
    )


def main(args: argparse.Namespace) -> None:
    run(
        args.params,
        args.prepared,
        args.target_visual,
        args.draft_visual,
        args.out,
        args.captions,
        args.checkpoint_every,
        args.drafter,
        args.ar_samples,
    )
