"""Kangaroo's loss: its adapter over the target's exit-layer state at position j learns to read
out what the target's last feature f_j reads out: the KL divergence of the adapter's next-token
distribution (the target's `lm_head` over its output) from the target's own. The exit layer's
states are collected with the features, and the adapter reads them as they are (no input noise:
it has no `head_noise`)."""

from __future__ import annotations

from mmspec.decoding.drafters.head_loss import HeadLoss, read_out_kl
from mmspec.decoding.drafters.kangaroo.drafter import LAYERS


class AdapterLoss(HeadLoss):
    """The read-out's KL over the target's exit-layer states (`shallow`)."""

    def __init__(self, training: dict):
        super().__init__(training)
        self.target_layers = (int(training.get("kangaroo_layers", LAYERS.default)),)

    def collect(self, target, prompt, answer, layers):
        """Entry j reads the exit layer's output at position j."""
        (exit_layer,) = self.target_layers
        return {"shallow": layers[exit_layer][:-1].float().cpu()}

    def __call__(self, head, lm_head, batch):
        out = head(batch.extra["shallow"], attention_mask=batch.attention)
        kl, top1 = read_out_kl(lm_head, out[batch.mask], batch.clean[batch.mask])
        return kl, {"kl": kl, "top1": top1}
