"""DREAM's intermediate features: per position, the target's hidden state that DREAM's
intermediate-feature loss supervises the head's stream with.

The feature at a position is hidden_states[l], l among 1 .. max(2, int(0.4 L) - 2) (its
release's range; the floor of 2 keeps a choice on shallow targets), the one whose reading layer
(attentions[l]: layer l + 1, which takes hidden_states[l] as its input; the release's pairing,
`ge_data/ge_data_all_llava_mix665k.py` `mid_feature_collect`) has the lowest attention entropy
there (mean over heads), or of the layer at a fixed share of the depth ("fixed", DREAM's
`dream_fixed_depth`: Section 4.2's Static-X%; the release has no such mode).
"""

from __future__ import annotations

import math

import torch

from mmspec.decoding.decoder import Decoder, eager_attention


def candidate_layers(n_layers: int, mode: str, depth: float | None = None) -> list[int]:
    """The target layers (1-based outputs) an intermediate feature may come from; "fixed": the
    one at the share `depth` of the target's layers (rounded down, at least the first)."""
    if mode == "fixed":
        if depth is None:
            raise ValueError("a fixed intermediate layer needs its depth share")
        # the epsilon keeps a share such as 0.29 x 100 (28.999...) on its layer
        return [max(1, math.floor(depth * n_layers + 1e-9))]
    return list(range(1, min(n_layers - 1, max(2, int(0.4 * n_layers) - 2)) + 1)) or [1]


def intermediate_features(model, prompt, answer: list[int], mode: str, depth: float | None = None):
    """(features [N, H], layer [N]) per position of prompt + answer: hidden_states[l] (the
    output of layer l, 1-based) of the candidate l whose reader, the next layer, has the lowest
    attention entropy at that position (mean over heads), or of the fixed layer (at the depth
    share `depth`); from a forward of transformers' own stack (eager attention)."""
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
