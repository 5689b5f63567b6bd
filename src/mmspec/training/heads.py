"""Training a drafter head on the target's own features (self-distillation, EAGLE's recipe).

The training set is the target's own behaviour: each training prompt is answered by the
target (greedy AR), and one teacher-forced pass over prompt + answer gives its feature at every
position (last layer, after the final norm: what its `lm_head` reads). Entry j of a sequence is
(input embedding of position j + 1, feature f_j); the head predicts f_{j+1}. The loss, on the
entries that predict answer tokens, weighs (LOSS_WEIGHTS) a SmoothL1 between predicted and true
features, a SmoothL1 between the head's intermediate stream and the target's intermediate
feature (DREAM), and the KL divergence of the head's next-token distribution (the target's
`lm_head` over the predicted feature) from the target's own (EAGLE's soft cross entropy differs
from it by the target's entropy, a constant: the same gradient). EAGLE's release
(`train/main.py`): 1.0 / - / 0.1; DREAM's (Section 4.1): 0.2 / 0.2 / 1.0. DREAM's intermediate
feature at a position is the output of the target layer whose attention there has the lowest
entropy (mean over heads) among layers 1 .. max(2, int(0.4 L) - 2) (its release's range; the
floor of 2 keeps a choice on shallow targets), or of the layer at half the depth ("fixed").
Input features carry uniform noise of width `head_noise` (the release's AddUniformNoise,
without its sequence-length scale). AdamW, betas (0.9, 0.95), gradient clip 0.5. Every
`eval_every` steps the held-out sequences (the last tenth) give the head's top-1 agreement with
the target: the training curve the report draws.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

# kind -> weights of (feature, intermediate, distribution) losses
LOSS_WEIGHTS = {"eagle": (1.0, 0.0, 0.1), "dream": (0.2, 0.2, 1.0)}
BETAS = (0.9, 0.95)
GRAD_CLIP = 0.5
HELD_OUT = 0.1  # share of training sequences kept for the agreement curve


@dataclass
class Sequence:
    """One training sequence: input embeddings [n, H], target features [n, H], and the first
    entry whose loss counts (entries before it predict prompt positions)."""

    embeds: torch.Tensor
    features: torch.Tensor
    answer_from: int
    intermediate: torch.Tensor | None = None  # [n, H] the intermediate feature (DREAM)
    layers: torch.Tensor | None = None  # [n] the target layer each intermediate comes from


def candidate_layers(n_layers: int, mode: str) -> list[int]:
    """The target layers (1-based outputs) an intermediate feature may come from."""
    if mode == "fixed":
        return [max(1, n_layers // 2)]
    return list(range(1, min(n_layers - 1, max(2, int(0.4 * n_layers) - 2)) + 1)) or [1]


def collect_sequence(target, prompt, answer: list[int], intermediate: str = "none") -> Sequence:
    """The target's features over `prompt` (a `Prompt`) and its own `answer` tokens, from one
    prefill and one teacher-forced extend of the target's `Decoder`; with `intermediate`
    ("entropy" or "fixed", DREAM) also its intermediate features."""
    with torch.inference_mode():
        head = target.prefill(prompt).hidden[0]
        tail = target.extend(answer).hidden[0] if answer else head[:0]
        ids = torch.as_tensor(answer, dtype=torch.long, device=target.device)
        embeds = torch.cat([prompt.embeds.to(target.device), target.embed(ids)])
        features = torch.cat([head, tail])
    inter = layers = None
    if intermediate != "none":
        inter, layers = intermediate_features(target.model, prompt, answer, intermediate)
        inter, layers = inter[:-1].float().cpu(), layers[:-1]
    # entry j pairs embeds[j + 1] with features[j]; the entry at the prompt's last position
    # but one predicts the feature that emits the first answer token
    n = len(prompt) - 2
    return Sequence(embeds[1:].float().cpu(), features[:-1].float().cpu(), n, inter, layers)


def intermediate_features(model, prompt, answer: list[int], mode: str):
    """(features [N, H], layer [N]) per position of prompt + answer: the output of the
    candidate layer whose attention at that position has the lowest entropy (mean over heads),
    or of the fixed layer; from a forward of transformers' own stack (eager attention)."""
    from mmspec.decoding.decoder import Decoder, eager_attention

    decoder = Decoder(model, lean=False)
    candidates = candidate_layers(len(decoder.stack.layers), mode)
    entropies: dict[int, list[torch.Tensor]] = {layer: [] for layer in candidates}

    def hook(layer):
        def record(module, args, output):
            weights = output[1][0].float()  # [heads, q, k]
            entropy = -(weights * weights.clamp_min(1e-12).log()).sum(-1).mean(0)
            entropies[layer].append(entropy.cpu())

        return record

    hooks = {layer - 1: hook(layer) for layer in candidates} if mode == "entropy" else {}
    with torch.inference_mode(), eager_attention(decoder.stack, hooks):
        first = decoder.prefill(prompt, layers=tuple(candidates))
        rest = decoder.extend(answer, layers=tuple(candidates)) if answer else None
    per_layer = torch.stack(
        [
            torch.cat([first.layers[k][0], rest.layers[k][0]] if rest else [first.layers[k][0]])
            for k in candidates
        ]
    )  # [layers, N, H]
    if mode == "entropy":
        chosen = torch.stack([torch.cat(entropies[k]) for k in candidates]).argmin(0)
    else:
        chosen = torch.zeros(per_layer.shape[1], dtype=torch.long)
    positions = torch.arange(per_layer.shape[1])
    layers = torch.as_tensor(candidates)[chosen]
    return per_layer[chosen.to(per_layer.device), positions.to(per_layer.device)], layers


def _batch(sequences: list[Sequence], noise: float, generator: torch.Generator):
    """Right-padded inputs, next features, loss mask and attention mask of a batch."""
    width = max(len(s.embeds) for s in sequences)
    hidden = sequences[0].embeds.shape[-1]
    embeds = torch.zeros(len(sequences), width, hidden)
    features = torch.zeros(len(sequences), width, hidden)
    targets = torch.zeros(len(sequences), width, hidden)
    loss_mask = torch.zeros(len(sequences), width, dtype=torch.bool)
    attention = torch.zeros(len(sequences), width, dtype=torch.long)
    inter = None
    if sequences[0].intermediate is not None:
        inter = torch.zeros(len(sequences), width, hidden)
    for b, s in enumerate(sequences):
        n = len(s.embeds)
        embeds[b, :n] = s.embeds
        features[b, :n] = s.features
        # the feature entry j predicts is the input feature of entry j + 1
        targets[b, : n - 1] = s.features[1:]
        if inter is not None:
            inter[b, : n - 1] = s.intermediate[1:]
        loss_mask[b, max(s.answer_from, 0) : n - 1] = True
        attention[b, :n] = 1
    if noise > 0:
        features = features + (torch.rand(features.shape, generator=generator) - 0.5) * noise
    return embeds, features, targets, loss_mask, attention, inter


def losses(head, lm_head, batch) -> tuple[torch.Tensor, ...]:
    """(feature loss, intermediate loss (0 without), KL from the target's distribution, top-1
    agreement with the target) over the masked entries."""
    embeds, features, targets, mask, attention, inter = batch
    out = head(embeds, features, attention_mask=attention)
    predicted, stream = out if isinstance(out, tuple) else (out, None)
    predicted, true = predicted[mask], targets[mask]
    feature_loss = F.smooth_l1_loss(predicted, true)
    inter_loss = torch.zeros((), dtype=predicted.dtype)
    if stream is not None and inter is not None:
        inter_loss = F.smooth_l1_loss(stream[mask], inter[mask])
    with torch.no_grad():
        target_logp = torch.log_softmax(lm_head(true), -1)
    logits = lm_head(predicted)
    kl = (target_logp.exp() * (target_logp - torch.log_softmax(logits, -1))).sum(-1).mean()
    agreement = (logits.argmax(-1) == target_logp.argmax(-1)).float().mean()
    return feature_loss, inter_loss, kl, agreement


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
    """Train `head` for hp["head_steps"] steps; the curve rows (step, losses, agreement).

    `state` (from `save`'s last call) resumes a run: the step, optimiser, random streams and
    curve continue where they stopped. `save(state)` is called every `eval_every` steps.
    """
    w_feature, w_inter, w_kl = LOSS_WEIGHTS[kind]
    train, held = split(sequences)
    if not train:
        raise ValueError("a drafter head needs at least two training sequences")
    steps = int(hp["head_steps"])
    eval_every = eval_every or max(1, steps // 10)
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
        batch = _batch(picker.sample(train, size), float(hp["head_noise"]), generator)
        feature_loss, inter_loss, kl, _ = losses(head, lm_head, batch)
        loss = w_feature * feature_loss + w_inter * inter_loss + w_kl * kl
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimiser.step()
        step += 1
        progress.update()
        if step % eval_every == 0 or step == steps:
            held_out = evaluate(head, lm_head, held)
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
def evaluate(head, lm_head, held: list[Sequence]) -> dict:
    """Held-out feature loss, cross entropy and top-1 agreement, weighted by entries."""
    head.eval()
    totals = {
        "heldout_feature_loss": 0.0,
        "heldout_intermediate_loss": 0.0,
        "heldout_kl": 0.0,
        "heldout_top1": 0.0,
    }
    entries = 0
    for s in held:
        batch = _batch([s], 0.0, torch.Generator())
        n = int(batch[3].sum())
        if n == 0:
            continue
        values = losses(head, lm_head, batch)
        for key, value in zip(totals, values, strict=True):
            totals[key] += float(value) * n
        entries += n
    return {k: v / entries if entries else math.nan for k, v in totals.items()}
