"""Stage train_drafter: train one drafter head on a target's own features.

-> results/drafters/<pair>/<kind>/<hp>/: the head (`save_pretrained`, its config naming the
target), `curves.parquet` (training and held-out curves) and `training.json`. The target
answers every prompt of the training dataset (greedy AR, as in a generate job: same prompts,
same visual cache; an image generator draws each caption's image, `collect_images`), then
`training.heads` fits the head. A killed job resumes: the collected
sequences and the training state are kept in `<out>.partial/` (the state every tenth of the
steps), under a key of the job's parameters and inputs, so a changed job starts afresh. They are
written durably (`mmspec.storage.durable`); a damaged one is named on stderr and dropped: damaged
sequences are collected again (and training restarts), a damaged state restarts training.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import torch
from tqdm import tqdm

from mmspec.data import media
from mmspec.decoding.drafters.heads import build_head, head_kind
from mmspec.decoding.loops import decode_ar
from mmspec.decoding.prompt import as_prompt
from mmspec.decoding.sampler import seeded
from mmspec.decoding.timing import pick_device
from mmspec.stages.checkpoints import clear_partial, job_key, one_writer, partial_folder
from mmspec.storage import durable, integrity
from mmspec.storage.tables import HEAD_CURVES, PREPARED, read_table, write_table
from mmspec.sweep.arguments import json_object
from mmspec.sweep.jobs import GenerateJob, TrainDrafterJob
from mmspec.training.heads import Sequence, collect_sequence, train_head

HELP = "train a drafter head on the target's features"
GPU = True
WARM = True


# what `train_head` saves and reads back to resume (training.heads)
STATE_PARTS = ("head", "optimiser", "picker", "generator", "curve", "step")


def _save(obj, path: Path) -> None:
    with durable.atomic_file(path) as sink:
        torch.save(obj, sink)


class Partial:
    """`<out>.partial/`: the sequences and the last training state of one job (its key)."""

    def __init__(self, out: Path, key: str):
        self.folder = partial_folder(out)
        key_file = self.folder / "key"
        if key_file.exists() and key_file.read_bytes() != key.encode():
            clear_partial(self.folder)  # another job's: its parameters or inputs changed
        if not key_file.exists():
            durable.write_text(key_file, key)

    def load(self, name: str, instead: str, problem=lambda obj: None):
        """What was saved as `name`, or None: nothing saved, or a damaged file (named on stderr
        with `instead`, what the job does without it, and removed). `problem(obj)`: what is
        wrong with a file torch reads, or None."""
        path = self.folder / f"{name}.pt"
        if not path.exists():
            return None
        try:
            obj = torch.load(path, weights_only=False)
            wrong = problem(obj)
        except Exception as err:  # a torn or garbled file fails in any of pickle's ways
            wrong = f"unreadable ({type(err).__name__}: {' '.join(str(err).split())})"
        if wrong is None:
            return obj
        print(f"{path}: {wrong}; dropped: {instead}", file=sys.stderr)
        path.unlink(missing_ok=True)
        return None

    def save(self, name: str, obj) -> None:
        _save(obj, self.folder / f"{name}.pt")

    def drop(self, name: str) -> None:
        (self.folder / f"{name}.pt").unlink(missing_ok=True)

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def sequences_problem(sequences) -> str | None:
    """What makes a loaded `sequences.pt` unusable, or None."""
    if not isinstance(sequences, list) or not sequences:
        return f"not a list of training sequences (a {type(sequences).__name__})"
    if not all(isinstance(s, Sequence) for s in sequences):
        return "not a list of training sequences"
    return None


def state_problem(state, head) -> str | None:
    """What makes a loaded `state.pt` unusable for `head`, or None."""
    if not isinstance(state, dict):
        return f"not a training state (a {type(state).__name__})"
    missing = [part for part in STATE_PARTS if part not in state]
    if missing:
        return f"not a whole training state (no {', '.join(missing)})"
    own = head.state_dict()
    saved = state["head"]
    if not isinstance(saved, dict) or saved.keys() != own.keys():
        return "its head's weights are not this head's"
    for name, tensor in own.items():
        if not isinstance(saved[name], torch.Tensor) or saved[name].shape != tensor.shape:
            return f"its head's weight {name} has another shape than this head's"
    return None


def collect(job: TrainDrafterJob, prepared: str, target_visual: str | None, device, stored=None):
    """(target `Decoder`, training sequences): the target's greedy answers and its features
    (`stored`: those of an interrupted run of the same job, kept)."""
    from mmspec.stages.generate import TextWork

    if job.task == media.IMAGE_GENERATION:
        return collect_images(job, prepared, device, stored)

    work = TextWork(
        GenerateJob.target_only(job.pair, job.task, job.generation),
        prepared,
        target_visual,
        None,
        None,
        device,
    )
    rows = read_table(prepared, PREPARED).to_pylist()
    if len(rows) < 2:
        raise ValueError(f"{prepared}: a drafter head needs at least 2 training samples")
    runner, sequences = work.runner, []
    if stored is not None:
        return runner.target, stored
    loss = head_kind(job.kind).loss(job.training)
    for row in tqdm(rows, desc="train_drafter: the target answers"):
        sample = work.sample(row)
        answer = work.decode_ar(sample, seeded(0)).tokens
        prompt = runner.target_prompt(sample)
        sequences.append(collect_sequence(runner.target, prompt, answer, loss))
    return runner.target, sequences


def collect_images(job: TrainDrafterJob, prepared: str, device, stored=None):
    """(the target's `Decoder`, training sequences) of an image generator: per caption, the
    target's guided greedy image and one guided sample (temperature 1, the generation's top-k:
    image generators decode both ways), each teacher-forced behind the conditional and behind
    the unconditional prompt, since a head under guidance runs both rows.

    LANTERN's drafter (its Appendix C) trains instead on 100k LAION-COCO images, dropping 10% of
    the conditions as the target's training did; here the target's own draws stand for a data
    set (its text heads train on the target's answers too) and every draw trains both rows."""
    from mmspec.stages.generate import ImageWork, sample_sampler

    work = ImageWork(
        GenerateJob.target_only(job.pair, job.task, job.generation),
        prepared,
        prepared,
        device,
    )
    runner = work.runner
    decoder = runner.target.decoder
    if stored is not None:
        return decoder, stored
    rows = read_table(prepared, PREPARED).to_pylist()
    if len(rows) < 2:
        raise ValueError(f"{prepared}: a drafter head needs at least 2 training samples")
    sequences, loss = [], head_kind(job.kind).loss(job.training)
    for row in tqdm(rows, desc="train_drafter: the target draws"):
        prompt = work.sample(row)
        sampler = sample_sampler(job.seed, row["sample_id"], row["turn"], "head")
        images = [
            decode_ar(runner.target, prompt.target, runner.grid, set(), temperature, sampler)
            for temperature in (0.0, 1.0)
        ]
        for image in images:
            for embeds in prompt.target:  # conditional, then unconditional
                sequences.append(collect_sequence(decoder, as_prompt(embeds), image.tokens, loss))
    return decoder, sequences


def run(
    job: TrainDrafterJob | dict,
    prepared: str,
    target_visual: str | None,
    out: str,
    threads: int = 1,
) -> dict:
    """Train the head `job` names (pair, kind, training, generation, seed) into `out`; `job`: the
    TrainDrafterJob, or its JSON's dict. One process trains a head at a time (`one_writer`)."""
    with one_writer(out):
        return _train(job, prepared, target_visual, out, threads)


def _train(job, prepared: str, target_visual: str | None, out: str, threads: int) -> dict:
    job = TrainDrafterJob.parse(job)
    started = time.perf_counter()
    torch.set_num_threads(threads)
    device = pick_device()
    hp, kind, pair = job.training, job.kind, job.pair
    out_dir = Path(out)
    partial = Partial(out_dir, job_key(job.to_dict(), prepared, target_visual))
    stored = partial.load(
        "sequences", "the target's answers are collected again", sequences_problem
    )
    target, sequences = collect(job, prepared, target_visual, device, stored)
    if stored is None:
        partial.drop("state")  # trained on sequences that are gone: training starts over
        partial.save("sequences", sequences)
    torch.manual_seed(job.seed)
    head = build_head(kind, target.model.config, hp, pair.target).float()
    state = partial.load(
        "state", "training starts again from step 0", lambda s: state_problem(s, head)
    )
    curve = train_head(
        head,
        target.lm_head.float(),
        sequences,
        hp,
        job.seed,
        state=state,
        save=lambda state: partial.save("state", state),
        kind=kind,
    )
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    head.save_pretrained(tmp)
    schema = curves_schema(curve)
    write_table(pa.Table.from_pylist(curve, schema=schema), tmp / "curves.parquet", schema)
    record = {
        "kind": kind,
        "target": pair.target,
        "training": hp,
        "sequences": len(sequences),
        "entries": sum(len(s.embeds) - max(s.answer_from, 0) - 1 for s in sequences),
        "seconds": time.perf_counter() - started,
        "final": curve[-1] if curve else {},
        **head_kind(kind).loss(hp).summary(sequences),
    }
    (tmp / "training.json").write_text(json.dumps(record, indent=1))
    integrity.write_manifest(tmp)
    durable.replace_folder(tmp, out_dir)  # its files on disk before it takes the name
    partial.clear()
    return record


def curves_schema(curve: list[dict]) -> pa.Schema:
    """HEAD_CURVES, and a column for each held-out metric a head kind's loss adds."""
    own = sorted({name for row in curve for name in row} - set(HEAD_CURVES.names))
    return pa.schema([*HEAD_CURVES, *(pa.field(name, pa.float64()) for name in own)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params", type=json_object, required=True, help="pair, kind, training, generation"
    )
    parser.add_argument("--prepared", required=True, help="the training dataset")
    parser.add_argument(
        "--target-visual", default=None, help="the target's visual cache of it (image prompts)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> None:
    record = run(args.params, args.prepared, args.target_visual, args.out, args.threads)
    final = record["final"]
    print(
        f"trained a {record['kind']} head on {record['sequences']} sequences in "
        f"{record['seconds']:.0f} s, held-out top-1 {final.get('heldout_top1', 0):.3f}",
        file=sys.stderr,
    )
