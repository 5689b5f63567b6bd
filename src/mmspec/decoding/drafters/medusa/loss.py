"""Medusa's and Hydra's loss: head k (0-based) on f_j against the target's read-out of
f_{j+k+1}, which predicts token j + k + 2 (Medusa's `train_legacy.py` and Hydra's `train.py`
shift head k's labels by k + 2), as the KL divergence from the target's distribution, weighted
decay**k (Medusa 0.8, Section 2.2.1 and its axolotl recipes' `medusa_decay_coefficient`; Hydra's
`train.py` sums its heads' losses unweighted). Hydra's head k also reads the embeddings of tokens
j + 1 .. j + k + 1 (entries j .. j + k: teacher-forced, as its release's grounded heads read the
input ids)."""

from __future__ import annotations

import torch

from mmspec.decoding.drafters.head_loss import HeadLoss, read_out_kl


class MedusaLoss(HeadLoss):
    """The heads' decayed sum of KLs; top-1 agreement of the first head."""

    decay = 0.8

    def __call__(self, head, lm_head, batch):
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
            kl, agree = read_out_kl(lm_head, predicted, batch.targets[:, k:][mask])
            total = total + self.decay**k * kl
            agreement = agree if agreement is None else agreement
        if agreement is None:
            agreement = torch.zeros((), device=total.device)
        return total, {"kl": total, "top1": agreement}


class HydraLoss(MedusaLoss):
    """Hydra's heads count alike."""

    decay = 1.0
