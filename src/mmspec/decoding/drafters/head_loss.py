"""How a trained head learns: the protocol a head kind's loss follows (`training.heads` runs it).

The training loop (`training.heads`) is the same for every kind. The target answers each
training prompt (greedy AR), and one teacher-forced pass over prompt + answer gives its feature
f at every position (its last layer after the final norm: what `lm_head` reads). Entry j of a
sequence pairs the input embedding of position j + 1 with f_j. A batch (`training.heads.Batch`)
holds, right-padded: `embeds`, `features` (f_j with the input noise), `clean` (f_j), `targets`
(f_{j+1}), `mask` (the entries that predict answer tokens), `attention` (the real entries) and
`extra` (the kind's own tensors). What differs per kind is its `HeadLoss`:

- `target_layers`: the target's layers (besides the last) whose outputs the pass keeps;
- `collect(target, prompt, answer, layers)`: the kind's own tensors of one sequence, by name,
  each entry-aligned (row j: what entry j's loss reads; fewer rows: the rest are padding). The
  loop right-pads each into `Batch.extra` under its name;
- `__call__(head, lm_head, batch)`: (the training objective, metrics by name), means over the
  masked entries. The held-out curve records every metric as `heldout_<name>`; the shared ones
  are `feature_loss`, `intermediate_loss`, `kl` (from the target's next-token distribution)
  and `top1` (agreement with the target's next token), 0 where a kind has none;
- `summary(sequences)`: what the head's training record adds about its collected data.

A kind's loss lives in its folder beside its drafter and network (`eagle/loss.py`, ...) and is
named by the drafter (`HeadDrafter.loss_class`), imported only when a head trains.
"""

from __future__ import annotations

from mmspec.decoding.lazy import torch


class HeadLoss:
    """A head kind's training: what it collects of the target and how it is scored. Built from
    the head's training hyperparameters (a method spec's `training` keys)."""

    target_layers: tuple[int, ...] = ()  # a kind that reads some sets them from `training`

    def __init__(self, training: dict):
        self.training = training

    def collect(self, target, prompt, answer: list[int], layers: dict) -> dict:
        """The kind's own entry-aligned tensors of one sequence (CPU), by name. `target` is the
        target's `Decoder`, `layers` maps each of `target_layers` to its outputs [N, H] over
        the N positions of prompt + answer (the sequence has N - 1 entries)."""
        return {}

    def __call__(self, head, lm_head, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(objective, metrics) of `head` on a `training.heads.Batch`."""
        raise NotImplementedError

    def summary(self, sequences: list) -> dict:
        """Entries the head's `training.json` adds about its training sequences."""
        return {}


def read_out_kl(lm_head, predicted: torch.Tensor, true: torch.Tensor):
    """(KL of the read-out of `predicted` from that of `true` features, top-1 agreement). The
    KL differs from EAGLE's soft cross-entropy by the target's entropy, a constant: the same
    gradient."""
    with torch.no_grad():
        target_logp = torch.log_softmax(lm_head(true), -1)
    logits = lm_head(predicted)
    kl = (target_logp.exp() * (target_logp - torch.log_softmax(logits, -1))).sum(-1).mean()
    agreement = (logits.argmax(-1) == target_logp.argmax(-1)).float().mean()
    return kl, agreement
