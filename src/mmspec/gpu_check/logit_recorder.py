"""A target decoder that keeps the logits of each AR step, to measure how far a flip was a tie."""

from __future__ import annotations


class LogitRecorder:
    """A target `Decoder` that keeps the logits each AR step picks its token from."""

    def __init__(self, decoder):
        self._decoder, self.logits = decoder, []

    def __getattr__(self, name):
        return getattr(self._decoder, name)

    def prefill(self, *args, **kwargs):
        out = self._decoder.prefill(*args, **kwargs)
        self.logits.append(out.logits[0].detach().clone())
        return out

    def extend(self, *args, **kwargs):
        out = self._decoder.extend(*args, **kwargs)
        self.logits.append(out.logits[0, -1].detach().clone())
        return out
