"""A prompt as one model's language model reads it: embeddings, positions, visual tokens.

Families differ in what their language model needs besides the embeddings: Qwen2/2.5-VL place
tokens on three rotary axes (M-RoPE: temporal, height, width for visual tokens, the text
position on all three), Gemma3 lets the tokens of one image see each other (a bidirectional
block in an otherwise causal mask). A `Prompt` carries both, as the family's own code computed
them (see `models.prompts`), so the decoder needs no family knowledge. It also keeps the token
ids its embeddings were built from, where they are known, for drafters that read tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmspec.decoding.lazy import torch


@dataclass
class Prompt:
    """embeds [L, H]; visual [L] bool; positions [A, L] (None: 0..L-1); blocks [L] (ids of the
    images whose tokens attend to each other bidirectionally, -1 elsewhere; None: causal); ids
    [L] long on the CPU: the token ids the embeddings were built from, a visual position holding
    its placeholder's id (the family's image or video token), None for bare embeddings."""

    embeds: torch.Tensor
    visual: torch.Tensor
    positions: torch.Tensor | None = None
    blocks: torch.Tensor | None = None
    ids: torch.Tensor | None = None

    @property
    def n_visual(self) -> int:
        """How many visual positions it holds."""
        return int(self.visual.sum())

    def __len__(self) -> int:
        return self.embeds.shape[0]

    def next_position(self) -> int:
        """The position of the first token after the prompt (M-RoPE: past the largest one)."""
        if self.positions is None:
            return len(self)
        return int(self.positions.max()) + 1

    def keep(self, kept: torch.Tensor) -> Prompt:
        """The prompt without the positions where `kept` ([L] bool) is False (pruned visual
        tokens). Family positions (M-RoPE) stay those of the kept tokens; 1D positions are
        renumbered, as if the pruned tokens had never been in the prompt."""
        kept = kept.to(torch.bool).cpu()
        device = self.embeds.device
        return Prompt(
            self.embeds[kept.to(device)],
            self.visual[kept],
            None if self.positions is None else self.positions[:, kept.to(self.positions.device)],
            None if self.blocks is None else self.blocks[kept],
            None if self.ids is None else self.ids[kept],
        )


def as_prompt(prompt) -> Prompt:
    """A Prompt from a Prompt or bare embeddings [L, H] (text positions, nothing visual)."""
    if isinstance(prompt, Prompt):
        return prompt
    return Prompt(prompt, torch.zeros(prompt.shape[0], dtype=torch.bool))


def image_blocks(visual: torch.Tensor) -> torch.Tensor:
    """Block ids of the runs of visual tokens ([L] bool -> [L] long, -1 for text)."""
    visual = visual.to(torch.bool).cpu()
    starts = visual & ~torch.cat([torch.zeros(1, dtype=torch.bool), visual[:-1]])
    ids = torch.cumsum(starts.long(), 0) - 1
    return torch.where(visual, ids, torch.full_like(ids, -1))
