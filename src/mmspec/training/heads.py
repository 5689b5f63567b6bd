"""Training a drafter head on the target's own features (self-distillation, EAGLE's recipe).

One loop for every head kind: collect, split, batch, optimise, evaluate. The training set is
the target's own behaviour: each training prompt is answered by the target (greedy AR), and one
teacher-forced pass over prompt + answer gives its feature at every position (last layer, after
the final norm: what its `lm_head` reads). Entry j of a sequence is (input embedding of position
j + 1, feature f_j); `Batch.targets` holds f_{j+1}. What a kind collects besides, and how its
head is scored, is its `HeadLoss` (`decoding.drafters.head_loss`; its drafter names it): the
loop keeps a kind's own tensors in `Sequence.extra` and pads them into `Batch.extra`, and never
asks which kind it trains.

Input features carry uniform noise of width `head_noise` (0 for a kind without one). AdamW,
betas (0.9, 0.95), gradient clip 0.5 (EAGLE's release, `train/main.py`). Every `eval_every`
steps the held-out sequences (the last tenth) give the head's held-out metrics: the training
curve the report draws.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from mmspec.decoding.drafters.head_loss import HeadLoss
from mmspec.decoding.drafters.heads import head_kind

BETAS = (0.9, 0.95)
GRAD_CLIP = 0.5
HELD_OUT = 0.1  # share of training sequences kept for the held-out curve
# the held-out metrics every curve row holds (tables.HEAD_CURVES): 0 where a kind has none
CURVE_METRICS = ("feature_loss", "intermediate_loss", "kl", "top1")


@dataclass
class Sequence:
    """One training sequence: input embeddings [n, H], target features [n, H], the first entry
    whose loss counts (entries before it predict prompt positions), and the head kind's own
    entry-aligned tensors by name (`HeadLoss.collect`)."""

    embeds: torch.Tensor
    features: torch.Tensor
    answer_from: int
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


def collect_sequence(target, prompt, answer: list[int], loss: HeadLoss | None = None) -> Sequence:
    """The target's features over `prompt` (a `Prompt`) and its own `answer` tokens, from one
    prefill and one teacher-forced extend of the target's `Decoder`, with what `loss` (the head
    kind's) collects besides (nothing without one)."""
    layers = loss.target_layers if loss is not None else ()
    with torch.inference_mode():
        first = target.prefill(prompt, layers=layers)
        rest = target.extend(answer, layers=layers) if answer else None
        ids = torch.as_tensor(answer, dtype=torch.long, device=target.device)
        embeds = torch.cat([prompt.embeds.to(target.device), target.embed(ids)])

    def joined(part):
        return torch.cat([part(first)[0], part(rest)[0]]) if rest else part(first)[0]

    features = joined(lambda f: f.hidden)
    extra = {}
    if loss is not None:
        outputs = {layer: joined(lambda f, layer=layer: f.layers[layer]) for layer in layers}
        extra = loss.collect(target, prompt, answer, outputs)
    # entry j pairs embeds[j + 1] with features[j]; the entry at the prompt's last position
    # but one predicts the feature that emits the first answer token
    return Sequence(embeds[1:].float().cpu(), features[:-1].float().cpu(), len(prompt) - 2, extra)


@dataclass
class Batch:
    """Right-padded training tensors [B, W, H] of a batch: `embeds` (entry j: the embedding of
    token j + 1), `features` (f_j, with the input noise), `clean` (f_j), `targets` (f_{j+1});
    `mask` [B, W] the entries whose loss counts, `attention` [B, W] the real (not padding)
    entries; `extra` the head kind's own tensors [B, W, ...], by name."""

    embeds: torch.Tensor
    features: torch.Tensor
    clean: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    attention: torch.Tensor
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def to(self, device) -> Batch:
        """This batch with every tensor on `device` (None: where it is)."""
        if device is None:
            return self
        fields = {k: v.to(device) for k, v in vars(self).items() if k != "extra"}
        return Batch(**fields, extra={k: v.to(device) for k, v in self.extra.items()})


def make_batch(
    sequences: list[Sequence], noise: float, generator: torch.Generator, device=None
) -> Batch:
    """The batch of `sequences`, built on the CPU (where the sequences are kept) and moved to
    `device` (the head's)."""
    width = max(len(s.embeds) for s in sequences)
    hidden = sequences[0].embeds.shape[-1]

    def zeros():
        return torch.zeros(len(sequences), width, hidden)

    batch = Batch(
        zeros(),
        zeros(),
        zeros(),
        zeros(),
        torch.zeros(len(sequences), width, dtype=torch.bool),
        torch.zeros(len(sequences), width, dtype=torch.long),
    )
    for name, value in sequences[0].extra.items():
        batch.extra[name] = torch.zeros(len(sequences), width, *value.shape[1:], dtype=value.dtype)
    for b, s in enumerate(sequences):
        n = len(s.embeds)
        batch.embeds[b, :n] = s.embeds
        batch.clean[b, :n] = s.features
        # the feature entry j predicts is the input feature of entry j + 1
        batch.targets[b, : n - 1] = s.features[1:]
        for name, value in s.extra.items():
            batch.extra[name][b, : len(value)] = value
        batch.mask[b, max(s.answer_from, 0) : n - 1] = True
        batch.attention[b, :n] = 1
    batch.features = batch.clean
    if noise > 0:
        # drawn on the CPU from the CPU generator: the same noise on every device
        uniform = torch.rand(batch.clean.shape, generator=generator) - 0.5
        batch.features = batch.clean + uniform * noise
    return batch.to(device)


def split(sequences: list[Sequence]) -> tuple[list[Sequence], list[Sequence]]:
    """(training, held-out): the held-out tenth is the last sequences (at least one)."""
    n_out = max(1, round(len(sequences) * HELD_OUT)) if len(sequences) > 1 else 0
    return sequences[: len(sequences) - n_out], sequences[len(sequences) - n_out :] or sequences


def train_head(
    head,
    lm_head,
    sequences,
    hp: dict,
    seed: int,
    state: dict | None = None,
    save=None,
    eval_every: int = 0,
    kind: str = "eagle",
) -> list[dict]:
    """Train `head`, of drafter `kind`, for hp["head_steps"] steps with its kind's loss; the
    curve rows (step, training objective, held-out metrics).

    The head trains on the device of `lm_head` (the target's: a GPU where the target runs on
    one); the sequences stay on the CPU and each batch moves there. `state` (from `save`'s last
    call) resumes a run: the step, optimiser, random streams and curve continue where they
    stopped. `save(state)` is called every `eval_every` steps.
    """
    loss_of = head_kind(kind).loss(hp)
    train, held = split(sequences)
    if not train:
        raise ValueError("a drafter head needs at least two training sequences")
    steps = int(hp["head_steps"])
    eval_every = eval_every or max(1, steps // 10)
    noise = float(hp.get("head_noise", 0.0))
    device = next(lm_head.parameters()).device
    head.to(device)
    lm_head.requires_grad_(False)
    params = [p for p in head.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=float(hp["head_lr"]), betas=BETAS)
    picker = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    curve: list[dict] = []
    step = 0
    if state is not None:
        head.load_state_dict(state["head"])
        optimiser.load_state_dict(state["optimiser"])
        picker.setstate(state["picker"])
        generator.set_state(state["generator"])
        curve, step = state["curve"], state["step"]
    size = min(int(hp["head_batch_size"]), len(train))
    progress = tqdm(total=steps, initial=step, desc="train_drafter")
    while step < steps:
        head.train()
        batch = make_batch(picker.sample(train, size), noise, generator, device)
        loss, _ = loss_of(head, lm_head, batch)
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimiser.step()
        step += 1
        progress.update()
        if step % eval_every == 0 or step == steps:
            held_out = evaluate(head, lm_head, held, loss_of)
            curve.append({"step": step, "loss": loss.detach().item(), **held_out})
            if save is not None:
                save(
                    {
                        "head": head.state_dict(),
                        "optimiser": optimiser.state_dict(),
                        "picker": picker.getstate(),
                        "generator": generator.get_state(),
                        "curve": curve,
                        "step": step,
                    }
                )
    progress.close()
    head.eval()
    return curve


@torch.no_grad()
def evaluate(head, lm_head, held: list[Sequence], loss_of: HeadLoss) -> dict:
    """Held-out metrics (`heldout_<name>`), each a mean over the counted entries."""
    head.eval()
    totals = dict.fromkeys(CURVE_METRICS, 0.0)
    entries = 0
    for s in held:
        batch = make_batch([s], 0.0, torch.Generator(), next(lm_head.parameters()).device)
        n = int(batch.mask.sum())
        if n == 0:
            continue
        _, metrics = loss_of(head, lm_head, batch)
        for name, value in metrics.items():
            totals[name] = totals.get(name, 0.0) + float(value) * n
        entries += n
    return {f"heldout_{k}": v / entries if entries else math.nan for k, v in totals.items()}
