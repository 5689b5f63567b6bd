"""EAGLE's loss: the head extrapolates the target's features (EAGLE, Li et al. 2024, Section 3;
release `train/main.py`). Entry j predicts f_{j+1}; the loss is a SmoothL1 between predicted and
true features plus 0.1 x the KL divergence of the head's next-token distribution (the target's
`lm_head` over the predicted feature) from the target's own, each a mean over the entries that
predict answer tokens. Its input features carry uniform noise of width `head_noise` (added by
the training loop: the release's AddUniformNoise, without its sequence-length scale)."""

from __future__ import annotations

import torch.nn.functional as F

from mmspec.decoding.drafters.head_loss import HeadLoss, read_out_kl

KL_WEIGHT = 0.1  # the release's p_w (its feature loss weighs v_w = 1.0)


class FeatureLoss(HeadLoss):
    """Next-feature regression plus the read-out's KL; nothing collected beyond the features."""

    def __call__(self, head, lm_head, batch):
        predicted = head(batch.embeds, batch.features, attention_mask=batch.attention)
        predicted, true = predicted[batch.mask], batch.targets[batch.mask]
        feature_loss = F.smooth_l1_loss(predicted, true)
        kl, top1 = read_out_kl(lm_head, predicted, true)
        objective = feature_loss + KL_WEIGHT * kl
        return objective, {"feature_loss": feature_loss, "kl": kl, "top1": top1}
