"""Training a drafter head on the target's own features (self-distillation, EAGLE's recipe).

The training set is the target's own behaviour: each training prompt is answered by the
target (greedy AR), and one teacher-forced pass over prompt + answer gives its feature at every
position (last layer, after the final norm: what its `lm_head` reads). Entry j of a sequence is
(input embedding of position j + 1, feature f_j); the head predicts f_{j+1}. The loss, on the
entries that predict answer tokens, weighs (the head kind's `weights`) three means over those
entries: a SmoothL1 between predicted and true features, a SmoothL1 between the head's
intermediate stream and the target's intermediate feature (DREAM), and the KL divergence of the
head's next-token distribution (the target's `lm_head` over the predicted feature) from the
target's own (EAGLE's soft cross entropy differs from it by the target's entropy, a constant:
the same gradient). EAGLE's release (`train/main.py`): 1.0 / - / 0.1; DREAM's paper (Section
4.1): 0.2 / 0.2 / 1.0; DREAM's release 0.2 r / r / 1/V, r the share of the batch's padded
entries that count and V the vocabulary (`drafters.dream.DreamDrafter.weights`). DREAM's
intermediate feature at a position is hidden_states[l], l among 1 .. max(2, int(0.4 L) - 2)
(its release's range; the floor of 2 keeps a choice on shallow targets), the one whose reading
layer (attentions[l]: layer l + 1, which takes hidden_states[l] as its input; the release's
pairing, `ge_data/ge_data_all_llava_mix665k.py` `mid_feature_collect`) has the lowest attention
entropy there (mean over heads), or of the layer at a fixed share of the depth ("fixed", DREAM's
`dream_fixed_depth`: Section 4.2's Static-X%; the release has no such mode).
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

from mmspec.decoding.drafters.heads import head_kind

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
    shallow: torch.Tensor | None = None  # [n, H] the output of the exit layer (Kangaroo)


def candidate_layers(n_layers: int, mode: str, depth: float | None = None) -> list[int]:
    """The target layers (1-based outputs) an intermediate feature may come from; "fixed": the
    one at the share `depth` of the target's layers (rounded down, at least the first)."""
    if mode == "fixed":
        if depth is None:
            raise ValueError("a fixed intermediate layer needs its depth share")
        # the epsilon keeps a share such as 0.29 x 100 (28.999...) on its layer
        return [max(1, math.floor(depth * n_layers + 1e-9))]
    return list(range(1, min(n_layers - 1, max(2, int(0.4 * n_layers) - 2)) + 1)) or [1]


def collect_sequence(
    target,
    prompt,
    answer: list[int],
    intermediate: str = "none",
    exit_layer: int = 0,
    depth: float | None = None,
) -> Sequence:
    """The target's features over `prompt` (a `Prompt`) and its own `answer` tokens, from one
    prefill and one teacher-forced extend of the target's `Decoder`; with `intermediate`
    ("entropy" or "fixed" at the depth share `depth`, DREAM) also its intermediate features,
    with `exit_layer` (Kangaroo) the output of that layer."""
    layers = (exit_layer,) if exit_layer else ()
    with torch.inference_mode():
        first = target.prefill(prompt, layers=layers)
        rest = target.extend(answer, layers=layers) if answer else None
        ids = torch.as_tensor(answer, dtype=torch.long, device=target.device)
        embeds = torch.cat([prompt.embeds.to(target.device), target.embed(ids)])

    def joined(part):
        return torch.cat([part(first)[0], part(rest)[0]]) if rest else part(first)[0]

    features = joined(lambda f: f.hidden)
    shallow = joined(lambda f: f.layers[exit_layer])[:-1].float().cpu() if exit_layer else None
    inter = chosen = None
    if intermediate != "none":
        inter, chosen = intermediate_features(target.model, prompt, answer, intermediate, depth)
        inter, chosen = inter[:-1].float().cpu(), chosen[:-1]
    # entry j pairs embeds[j + 1] with features[j]; the entry at the prompt's last position
    # but one predicts the feature that emits the first answer token
    return Sequence(
        embeds[1:].float().cpu(),
        features[:-1].float().cpu(),
        len(prompt) - 2,
        inter,
        chosen,
        shallow,
    )


def intermediate_features(model, prompt, answer: list[int], mode: str, depth: float | None = None):
    """(features [N, H], layer [N]) per position of prompt + answer: hidden_states[l] (the
    output of layer l, 1-based) of the candidate l whose reader, the next layer, has the lowest
    attention entropy at that position (mean over heads), or of the fixed layer (at the depth
    share `depth`); from a forward of transformers' own stack (eager attention)."""
    from mmspec.decoding.decoder import Decoder, eager_attention

    decoder = Decoder(model, lean=False)
    candidates = candidate_layers(len(decoder.stack.layers), mode, depth)
    entropies: dict[int, list[torch.Tensor]] = {layer: [] for layer in candidates}

    def hook(layer):
        def record(module, args, output):
            weights = output[1][0].float()  # [heads, q, k]
            entropy = -(weights * weights.clamp_min(1e-12).log()).sum(-1).mean(0)
            entropies[layer].append(entropy.cpu())

        return record

    # hidden_states[l] is scored by the attention of the layer that reads it, attentions[l]
    # (0-based layer l): DREAM's release, `mid_feature_collect` (l. 129-144) gathers
    # features_stack[l] at the argmin over att_entropy_stack[l] = entropy(attn_tuple[l])
    hooks = {layer: hook(layer) for layer in candidates} if mode == "entropy" else {}
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


@dataclass
class Batch:
    """Right-padded training tensors [B, W, H] of a batch: `embeds` (entry j: the embedding of
    token j + 1), `features` (f_j, with the input noise), `clean` (f_j), `targets` (f_{j+1}),
    `intermediate` (DREAM's, at j + 1), `shallow` (Kangaroo's layer output at j); `mask` [B, W]
    the entries whose loss counts, `attention` [B, W] the real (not padding) entries."""

    embeds: torch.Tensor
    features: torch.Tensor
    clean: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    attention: torch.Tensor
    intermediate: torch.Tensor | None = None
    shallow: torch.Tensor | None = None

    def to(self, device) -> Batch:
        """This batch with every tensor on `device` (None: where it is)."""
        if device is None:
            return self
        return Batch(**{k: None if v is None else v.to(device) for k, v in vars(self).items()})


def _batch(
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
    if sequences[0].intermediate is not None:
        batch.intermediate = zeros()
    if sequences[0].shallow is not None:
        batch.shallow = zeros()
    for b, s in enumerate(sequences):
        n = len(s.embeds)
        batch.embeds[b, :n] = s.embeds
        batch.clean[b, :n] = s.features
        # the feature entry j predicts is the input feature of entry j + 1
        batch.targets[b, : n - 1] = s.features[1:]
        if batch.intermediate is not None:
            batch.intermediate[b, : n - 1] = s.intermediate[1:]
        if batch.shallow is not None:
            batch.shallow[b, :n] = s.shallow
        batch.mask[b, max(s.answer_from, 0) : n - 1] = True
        batch.attention[b, :n] = 1
    batch.features = batch.clean
    if noise > 0:
        # drawn on the CPU from the CPU generator: the same noise on every device
        uniform = torch.rand(batch.clean.shape, generator=generator) - 0.5
        batch.features = batch.clean + uniform * noise
    return batch.to(device)


def _kl(lm_head, predicted: torch.Tensor, true: torch.Tensor):
    """(KL of the read-out of `predicted` from that of `true` features, top-1 agreement)."""
    with torch.no_grad():
        target_logp = torch.log_softmax(lm_head(true), -1)
    logits = lm_head(predicted)
    kl = (target_logp.exp() * (target_logp - torch.log_softmax(logits, -1))).sum(-1).mean()
    agreement = (logits.argmax(-1) == target_logp.argmax(-1)).float().mean()
    return kl, agreement


def losses(head, lm_head, batch: Batch, kind: str = "eagle") -> tuple[torch.Tensor, ...]:
    """(feature loss, intermediate loss, KL from the target's distribution, top-1 agreement
    with the target at the first drafted position) over the masked entries; 0 for a loss a
    kind does not have. The head kind's declared `loss` says how its network reads a batch."""
    loss = head_kind(kind).loss
    zero = torch.zeros((), device=batch.mask.device)
    if loss == "multi_token":
        kl, agreement = _multi_token(head, lm_head, batch, head_kind(kind).decay)
        return zero, zero, kl, agreement
    if loss == "adapter":
        # the adapter over the target's shallow states at j reads out what f_j reads out
        out = head(batch.shallow, attention_mask=batch.attention)
        kl, agreement = _kl(lm_head, out[batch.mask], batch.clean[batch.mask])
        return zero, zero, kl, agreement
    out = head(batch.embeds, batch.features, attention_mask=batch.attention)
    predicted, stream = out if isinstance(out, tuple) else (out, None)
    predicted, true = predicted[batch.mask], batch.targets[batch.mask]
    feature_loss = F.smooth_l1_loss(predicted, true)
    inter_loss = zero
    if stream is not None and batch.intermediate is not None:
        inter_loss = F.smooth_l1_loss(stream[batch.mask], batch.intermediate[batch.mask])
    kl, agreement = _kl(lm_head, predicted, true)
    return feature_loss, inter_loss, kl, agreement


def weighted(drafter, hp: dict, batch: Batch, vocab: int, parts) -> torch.Tensor:
    """The training loss: the kind's weights (`weights`, given the share of the batch's padded
    entries whose loss counts and the vocabulary's size) times the (feature, intermediate, KL)
    masked means."""
    share = float(batch.mask.sum()) / batch.mask.numel()
    w = drafter.weights(hp, share, vocab)
    return sum(weight * part for weight, part in zip(w, parts, strict=True))


def _multi_token(head, lm_head, batch: Batch, decay: float = 0.8):
    """Medusa's and Hydra's loss: head k (0-based) on f_j against the target's read-out of
    f_{j+k+1} (which predicts token j + k + 2; Medusa's `train_legacy.py` and Hydra's
    `train.py` shift head k's labels by k + 2), weighted decay**k (Medusa 0.8, Section 2.2.1;
    Hydra 1); Hydra's head k also reads the embeddings of tokens j + 1 .. j + k + 1 (entries
    j .. j + k: teacher-forced, as its release's grounded heads read the input ids)."""
    width = batch.mask.shape[1]
    total, agreement = torch.zeros((), device=batch.mask.device), None
    for k in range(head.config.heads):
        if width - k < 1:
            break
        mask = batch.mask[:, : width - k] & batch.mask[:, k:]
        if not mask.any():
            continue
        tokens = None
        if head.config.sequential:
            tokens = torch.stack([batch.embeds[:, i : width - k + i] for i in range(k + 1)], 2)
            tokens = tokens[mask]
        predicted = head.head(k, batch.features[:, : width - k][mask], tokens)
        kl, agree = _kl(lm_head, predicted, batch.targets[:, k:][mask])
        total = total + decay**k * kl
        agreement = agree if agreement is None else agreement
    return total, agreement if agreement is not None else torch.zeros((), device=total.device)


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

    The head trains on the device of `lm_head` (the target's: a GPU where the target runs on
    one); the sequences stay on the CPU and each batch moves there. `state` (from `save`'s last
    call) resumes a run: the step, optimiser, random streams and curve continue where they
    stopped. `save(state)` is called every `eval_every` steps.
    """
    drafter = head_kind(kind)
    train, held = split(sequences)
    if not train:
        raise ValueError("a drafter head needs at least two training sequences")
    steps = int(hp["head_steps"])
    eval_every = eval_every or max(1, steps // 10)
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
    vocab = None
    progress = tqdm(total=steps, initial=step, desc="train_drafter")
    while step < steps:
        head.train()
        # Kangaroo's adapter reads the target's own shallow states: no noise (no head_noise key)
        noise = float(hp.get("head_noise", 0.0))
        batch = _batch(picker.sample(train, size), noise, generator, device)
        feature_loss, inter_loss, kl, _ = losses(head, lm_head, batch, kind)
        if vocab is None:  # the read-out's width (an image generator's head too)
            with torch.no_grad():
                vocab = lm_head(batch.clean[:1, :1]).shape[-1]
        loss = weighted(drafter, hp, batch, vocab, (feature_loss, inter_loss, kl))
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimiser.step()
        step += 1
        progress.update()
        if step % eval_every == 0 or step == steps:
            held_out = evaluate(head, lm_head, held, kind)
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
def evaluate(head, lm_head, held: list[Sequence], kind: str = "eagle") -> dict:
    """Held-out losses and top-1 agreement, weighted by entries."""
    head.eval()
    totals = {
        "heldout_feature_loss": 0.0,
        "heldout_intermediate_loss": 0.0,
        "heldout_kl": 0.0,
        "heldout_top1": 0.0,
    }
    entries = 0
    for s in held:
        batch = _batch([s], 0.0, torch.Generator(), next(lm_head.parameters()).device)
        n = int(batch.mask.sum())
        if n == 0:
            continue
        values = losses(head, lm_head, batch, kind)
        for key, value in zip(totals, values, strict=True):
            totals[key] += float(value) * n
        entries += n
    return {k: v / entries if entries else math.nan for k, v in totals.items()}
