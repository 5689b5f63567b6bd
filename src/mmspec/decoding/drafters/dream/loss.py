"""DREAM's loss: EAGLE's feature and KL losses plus an intermediate-feature loss, a SmoothL1
between the head's stream after its cross-attention block and the target's intermediate feature
(`dream.intermediate`) at the predicted position, each a mean over the entries that predict
answer tokens. `dream_loss` weighs the three as DREAM's release does ("release") or as its paper
states ("paper"), see `DreamLoss.weights`. Input features carry uniform noise of width
`head_noise` (added by the training loop, as for EAGLE)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmspec.decoding.drafters.dream.intermediate import intermediate_features
from mmspec.decoding.drafters.head_loss import HeadLoss, read_out_kl

PAPER_WEIGHTS = (0.2, 0.2, 1.0)  # DREAM, Section 4.1


class DreamLoss(HeadLoss):
    """Feature, intermediate-feature and distribution losses; collects the target's intermediate
    features (`dream_intermediate`: "entropy", "fixed" at `dream_fixed_depth`, or "none")."""

    def __init__(self, training: dict):
        super().__init__(training)
        self.intermediate = training.get("dream_intermediate", "none")
        self.depth = training.get("dream_fixed_depth")
        self.weighting = training.get("dream_loss", "release")

    def collect(self, target, prompt, answer, layers):
        """Entry j learns position j + 1's intermediate feature (`intermediate`); `layers`
        says which target layer gave it (the training record counts them)."""
        if self.intermediate == "none":
            return {}
        features, chosen = intermediate_features(
            target.model, prompt, answer, self.intermediate, self.depth
        )
        return {"intermediate": features[1:-1].float().cpu(), "layers": chosen[1:-1]}

    def __call__(self, head, lm_head, batch):
        predicted, stream = head(batch.embeds, batch.features, attention_mask=batch.attention)
        mask = batch.mask
        predicted, true = predicted[mask], batch.targets[mask]
        feature_loss = F.smooth_l1_loss(predicted, true)
        intermediate_loss = torch.zeros((), device=mask.device)
        if "intermediate" in batch.extra:
            intermediate_loss = F.smooth_l1_loss(stream[mask], batch.extra["intermediate"][mask])
        kl, top1 = read_out_kl(lm_head, predicted, true)
        w_feature, w_intermediate, w_kl = self.weights(batch, lm_head, true)
        objective = w_feature * feature_loss + w_intermediate * intermediate_loss + w_kl * kl
        metrics = {"feature_loss": feature_loss, "intermediate_loss": intermediate_loss}
        return objective, {**metrics, "kl": kl, "top1": top1}

    def weights(self, batch, lm_head, true) -> tuple[float, float, float]:
        """Weights of the masked means of (feature SmoothL1, intermediate SmoothL1, KL summed
        over the vocabulary).

        "release" (`train/main_deepspeed.py`): loss = 0.2 x vloss + 1.0 x ploss + mid_vloss
        (l. 28-29, 312), where both SmoothL1 sums are divided by all B x W padded positions
        (`compute_loss` l. 228, `compute_mid_loss` l. 235) and the "ploss" the total reads is
        the KL averaged over the vocabulary (`compute_loss` returns its `kldloss` second,
        l. 229-231; the cross-entropy named ploss at l. 226 is unused): 0.2 r, r and 1/V, r the
        share of the batch's padded entries whose loss counts and V the vocabulary (the
        read-out's width: an image generator's codes too). "paper" (Section 4.1): 0.2, 0.2
        and 1.0."""
        if self.weighting == "paper":
            return PAPER_WEIGHTS
        share = float(batch.mask.sum()) / batch.mask.numel()
        with torch.no_grad():
            vocab = lm_head(true[:1]).shape[-1]
        return 0.2 * share, share, 1.0 / vocab

    def summary(self, sequences: list) -> dict:
        """How often each target layer gave the intermediate feature the loss reads: one count
        per training entry (entry j learns position j + 1's)."""
        counts: dict[str, int] = {}
        for s in sequences:
            if "layers" not in s.extra:
                continue
            for layer in s.extra["layers"][max(s.answer_from, 0) :].tolist():
                counts[str(layer)] = counts.get(str(layer), 0) + 1
        return {"intermediate_layers": dict(sorted(counts.items(), key=lambda kv: int(kv[0])))}
