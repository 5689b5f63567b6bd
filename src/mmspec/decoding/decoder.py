"""A causal LM with its own KV cache: the one object the decoding loops talk to.

It wraps the language-model part of any HF model (`model.model.language_model`, Idefics3's
`model.model.text_model`, a plain causal LM's `model.model`) and its `lm_head`. The vision tower
is never called here: images enter as precomputed embeddings in the prompt (see `prompt` and
`models.prompts`), with the family's own positions (M-RoPE) and image blocks (Gemma3).
Sliding-window layers keep their whole history in the growing cache; the window is applied by
the masks built here, so tree verification and compaction work on them as on full layers.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mmspec.decoding.lazy import F, inference_mode, torch
from mmspec.decoding.lean_stack import LeanStack, supports
from mmspec.decoding.prompt import Prompt, as_prompt

if TYPE_CHECKING:
    from transformers import DynamicCache


@dataclass
class Forward:
    """What one forward returns, per row: logits (prefill: the last position's [B, V]; extend:
    [B, n, V]), the last layer's hidden states of every position [B, n, H], and those of the
    layers asked for (`layers`: index into the model's hidden_states -> [B, n, H]). A drafter's
    `start` and `commit` get one row of it (`row`, `select`): no batch dimension."""

    logits: (
        torch.Tensor
    )  # next-token logits: a prefill's last position [B, V], an extend's [B, n, V]
    hidden: torch.Tensor  # the last layer's hidden states (after the final norm), [B, n, H]
    layers: dict[int, torch.Tensor] = field(default_factory=dict)  # hidden_states[i], [B, n, H]
    # prefill with `score_visual`: the attention each visual position receives, [n_visual]
    visual_attention: torch.Tensor | None = None
    # guided decoding (`GuidedDecoder`): the unconditional row's last-layer states, shaped as
    # `hidden` (whose states are the conditional row's); what a drafter head under guidance reads
    unconditional: torch.Tensor | None = None

    def row(self, b: int) -> Forward:
        """Row b of a batched forward (drops the batch dimension)."""
        layers = {k: v[b] for k, v in self.layers.items()}
        uncond = self.unconditional[b] if self.unconditional is not None else None
        return Forward(self.logits[b], self.hidden[b], layers, self.visual_attention, uncond)

    def select(self, positions: list[int]) -> Forward:
        """The given positions of a one-row forward (consecutive ones as a view, with no index
        tensor to build and copy to the device: an accepted chain)."""
        if positions == list(range(positions[0], positions[0] + len(positions))):
            positions = slice(positions[0], positions[0] + len(positions))
        layers = {k: v[positions] for k, v in self.layers.items()}
        uncond = self.unconditional[positions] if self.unconditional is not None else None
        return Forward(self.logits[positions], self.hidden[positions], layers, None, uncond)


def language_parts(model) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    """(decoder stack, lm_head, input embedding) of a multimodal or text-only HF model."""
    inner = model.model
    stack = getattr(inner, "language_model", None) or getattr(inner, "text_model", None) or inner
    return stack, model.lm_head, model.get_input_embeddings()


def sliding_window(config) -> tuple[int | None, bool]:
    """(window, every layer slides) of a language model config; window None: no sliding layer."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is not None:
        return (window, False) if window and "sliding_attention" in types else (None, False)
    return (window, True) if window else (None, False)


class _Scores:
    """Per-layer text-to-visual attention, reduced as each layer runs (see visual_attention)."""

    def __init__(self, visual: torch.Tensor):
        self.visual = visual.bool()
        positions = torch.nonzero(self.visual).flatten()
        if len(positions) == 0:
            raise ValueError("scoring visual tokens needs a prompt with visual tokens")
        # text queries: the positions after the last visual token (the instruction that follows
        # the images/frames; earlier text cannot see the later frames under the causal mask)
        last = int(positions[-1])
        queries = torch.arange(last + 1, len(self.visual))
        self.queries = queries if len(queries) else torch.tensor([last])
        self.layers: list[torch.Tensor] = []

    def hook(self, module, args, output) -> None:
        weights = output[1]  # [1, heads, L, L] under eager attention
        if weights is None or weights.shape[-1] != len(self.visual):
            raise RuntimeError("visual scoring needs the attention weights of a one-row prefill")
        received = weights[0].float().mean(0)[self.queries.to(weights.device)].mean(0)
        self.layers.append(received[self.visual.to(weights.device)])

    def result(self) -> torch.Tensor:
        return torch.stack(self.layers).mean(0).cpu()


@contextmanager
def eager_attention(stack, hooks: dict):
    """Run the stack with eager attention, calling `hooks[i](module, args, output)` after
    layer i's self-attention (its output[1]: the weights [B, heads, q, k]); SDPA does not
    return weights, hence eager while the context lasts."""
    config = stack.config
    previous = config._attn_implementation
    config._attn_implementation = "eager"
    handles = [stack.layers[i].self_attn.register_forward_hook(h) for i, h in hooks.items()]
    try:
        yield
    finally:
        config._attn_implementation = previous
        for handle in handles:
            handle.remove()


@contextmanager
def visual_attention(stack, visual: torch.Tensor):
    """Run the stack with eager attention and collect, per layer, the attention each visual
    position receives from the text queries (mean over heads and queries); `result()` averages
    the layers (SpecVLM's verifier-guided scores).

    Each layer's weights are reduced in a hook and dropped, so only one layer's [heads, L, L]
    lives at a time.
    """
    scores = _Scores(visual)
    with eager_attention(stack, dict.fromkeys(range(len(stack.layers)), scores.hook)):
        yield scores


class Decoder:
    """One model's incremental decoding state over B rows: a DynamicCache and its length.

    Rows are prompts of possibly different lengths (the views of a batched ensemble), left-padded
    to a common length at prefill; every later token is appended to all rows at once, so the rows
    stay aligned and `keep`/`truncate` act on all of them alike.
    """

    def __init__(self, model, lean: bool = True, parts: tuple | None = None):
        """`parts`: (stack, output head, token embedding) in place of `language_parts(model)`,
        for a model that decodes another vocabulary through heads of its own (Janus's image
        codes); the embedding must have a `weight` (where inputs go)."""
        self.model = model  # the transformers model it decodes with
        stack, lm_head, embed = parts or language_parts(model)
        self.stack = stack  # the language model's decoder layers and final norm
        self.lm_head = lm_head  # the output head: hidden states [..., H] -> logits [..., V]
        self.embed = embed  # the token embedding (an nn.Embedding's interface: `weight`)
        # transformers' forward for what the lean one does not cover (or `lean=False`)
        self.lean = LeanStack(self.stack) if lean and supports(model, self.stack) else None
        self.window = sliding_window(self.stack.config)  # (window, every layer slides)
        # inputs start at the embeddings; a model split by a device_map (accelerate hooks move
        # each layer's inputs) returns its logits here too, next to the draft's
        self.device = self.embed.weight.device  # where its inputs go
        self.cache: DynamicCache | None = None
        self.length = 0  # cached positions per row, padding included
        self.pad = torch.zeros(1, dtype=torch.long)  # left padding of each row
        self.padded = False
        self.shift = torch.zeros(1, dtype=torch.long)  # position of row b = length + shift[b]
        self.common_shift: int | None = 0  # the rows' shift when they share one (Python int)
        self.split = bool(getattr(model, "hf_device_map", None))
        # plain modules are called in their functional form, minus the module-call overhead per
        # step (not when split: accelerate's hooks, which move the inputs, live in the call)
        self.plain_embed = type(self.embed) is torch.nn.Embedding and not self.split
        self.plain_head = type(self.lm_head) is torch.nn.Linear and not self.split
        self.causal_blocks: dict = {}  # (n, dtype) -> additive causal mask [n, n]

    @property
    def rows(self) -> int:
        """The rows it decodes (its prompts at prefill: a drafter's views)."""
        return len(self.pad)

    @inference_mode
    def prefill(
        self,
        prompts: Prompt | torch.Tensor | list,
        score_visual: torch.Tensor | None = None,
        layers: tuple[int, ...] = (),
    ) -> Forward:
        """Start a fresh cache from prompts (one `Prompt`, or embeddings [L, H], per row).

        Returns the last position's logits [B, V] and the hidden states of every position. With
        `score_visual` (a bool mask [L] of one prompt's visual positions) it also scores them by
        the text-to-visual attention (see `visual_attention`), in a forward of its own: that one
        runs eager attention, whose rounding differs from the kernel AR decodes with, so the
        cache and logits always come from the ordinary forward.
        """
        single = isinstance(prompts, (Prompt, torch.Tensor))
        prompts = [as_prompt(p) for p in ([prompts] if single else prompts)]
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        self.pad = torch.tensor([width - n for n in lengths], dtype=torch.long, device=self.device)
        self.padded = width != min(lengths)  # a Python flag: no device sync per forward
        # [B, width] True at each row's left padding, which later tokens never see
        self.pad_keys = torch.arange(width, device=self.device).view(1, -1) < self.pad.view(-1, 1)
        embeds = prompts[0].embeds.new_zeros(len(prompts), width, prompts[0].embeds.shape[-1])
        axes = max(1 if p.positions is None else p.positions.shape[0] for p in prompts)
        positions = torch.zeros(axes, len(prompts), width, dtype=torch.long, device=self.device)
        blocks = None
        if any(p.blocks is not None for p in prompts):
            blocks = torch.full((len(prompts), width), -1, dtype=torch.long, device=self.device)
        for b, prompt in enumerate(prompts):
            start = width - lengths[b]
            embeds[b, start:] = prompt.embeds
            own = prompt.positions
            if own is None:
                own = torch.arange(lengths[b]).view(1, -1).expand(axes, -1)
            positions[:, b, start:] = own.to(self.device)
            if prompt.blocks is not None:
                blocks[b, start:] = prompt.blocks.to(self.device)
        # later tokens continue from each row's next position: length + shift
        shifts = [p.next_position() - width for p in prompts]
        self.shift = torch.tensor(shifts, dtype=torch.long, device=self.device)
        self.common_shift = shifts[0] if len(set(shifts)) == 1 else None
        self.length = 0
        position_ids = positions[0] if axes == 1 else positions
        scores = None
        if score_visual is not None:
            if len(prompts) != 1:
                raise ValueError("scoring visual tokens needs a one-row prefill")
            mask = self._masks(1, width, None, None, embeds.dtype, blocks)
            with visual_attention(self.stack, score_visual) as scoring:
                self.stack(
                    inputs_embeds=embeds,
                    attention_mask=mask,
                    position_ids=position_ids,
                    use_cache=False,
                )
            scores = scoring.result()
        from mmspec.decoding.kv_cache import new_cache  # transformers: imported on first use

        self.cache = new_cache(self.stack.config)
        out = self._run(
            embeds, layers=layers, position_ids=position_ids, blocks=blocks, last_only=True
        )
        out.logits = out.logits[:, -1]
        out.visual_attention = scores
        return out

    @inference_mode
    def extend(
        self,
        tokens: list[int] | torch.Tensor,
        attention: torch.Tensor | None = None,
        past: torch.Tensor | None = None,
        positions: list[int] | None = None,
        layers: tuple[int, ...] = (),
    ) -> Forward:
        """Append the same tokens to every row; returns logits [B, n, V] and hidden [B, n, H].

        `attention` ([n, n] bool, True = may attend) restricts how the new tokens see each other
        (token trees; each node then sits at position base + its depth). `past` ([n, k] bool)
        restricts what they see of the last k cached positions (tree nodes drafted earlier in the
        same proposal); the rest of the cache is always visible. `positions` overrides the new
        tokens' positions (unpadded). `layers` asks for hidden states of more layers.
        """
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device).view(1, -1)
        if self.plain_embed:
            embeds = F.embedding(ids, self.embed.weight)
        else:
            embeds = self.embed(ids)
        embeds = embeds.expand(self.rows, -1, -1)
        return self._run(embeds, attention, past, positions, layers)

    @inference_mode
    def extend_vectors(
        self,
        vectors: torch.Tensor,
        attention: torch.Tensor | None = None,
        past: torch.Tensor | None = None,
        positions: list[int] | None = None,
    ) -> Forward:
        """`extend` with input vectors [n, H] (the same for every row) or [B, n, H] (one set
        per row) in place of token embeddings (a drafter head whose inputs mix embeddings with
        the target's features)."""
        embeds = vectors.to(self.device)
        if embeds.dim() == 2:
            embeds = embeds.unsqueeze(0).expand(self.rows, -1, -1)
        return self._run(embeds, attention, past, positions)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head over hidden states [..., H]."""
        return self._head(hidden)

    def _consecutive(self) -> bool:
        """Whether every row continues at the same position (a Python int), so that plain
        tokens' rotary rows are a slice of the lean forward's table."""
        return self.lean is not None and self.common_shift is not None

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.plain_head:
            return F.linear(hidden, self.lm_head.weight, self.lm_head.bias)
        return self.lm_head(hidden)

    def _run(
        self,
        embeds,
        attention=None,
        past=None,
        positions=None,
        layers=(),
        position_ids=None,
        blocks=None,
        last_only=False,
    ) -> Forward:
        """One forward of n new positions per row; `last_only`: logits of the last one only."""
        rows, n = embeds.shape[:2]
        start = None  # the first of n consecutive positions shared by every row
        if position_ids is None and positions is None and attention is None and self._consecutive():
            start = max(self.length + self.common_shift, 0)
        elif position_ids is None:
            if positions is not None:
                steps = torch.as_tensor(positions, device=self.device) - self.length
            elif attention is not None:
                steps = attention.to(self.device).sum(-1) - 1  # a tree node's depth below the root
            else:
                steps = torch.arange(n, device=self.device)
            position_ids = (self.length + steps).unsqueeze(0) + self.shift.unsqueeze(1)
        mask = self._masks(rows, n, attention, past, embeds.dtype, blocks)
        if self.lean is not None:
            ids = None if start is not None else position_ids.clamp_min(0)
            hidden, extra = self.lean(embeds, mask, ids, self.cache, layers, start=start)
        else:
            out = self.stack(
                inputs_embeds=embeds,
                attention_mask=mask,
                position_ids=position_ids.clamp_min(0),
                past_key_values=self.cache,
                use_cache=True,
                output_hidden_states=bool(layers),
            )
            hidden = out.last_hidden_state
            extra = {k: out.hidden_states[k] for k in layers}
        self.length += n
        logits = self._head(hidden[:, -1:] if last_only else hidden)
        if self.split:  # a model split over devices returns its outputs next to the draft's
            extra = {k: v.to(self.device) for k, v in extra.items()}
            logits, hidden = logits.to(self.device), hidden.to(self.device)
        return Forward(logits, hidden, extra)

    def _masks(self, rows, n, attention, past, dtype, blocks=None):
        """The attention mask(s) of a forward of n new tokens, or None when none is needed: one
        token, or transformers' own causal mask is exact (no padding, tree, image block or
        sliding window; the lean forward builds none)."""
        window, all_sliding = self.window
        plain = attention is None and past is None and not self.padded and blocks is None
        if plain and not window and (n == 1 or self.lean is None):
            return None
        if not window and blocks is None and (not self.padded or self.length):
            return self._sparse_mask(rows, n, attention, past, dtype)
        allowed = self._allowed(rows, n, attention, past, blocks)
        if not window:
            return _additive(allowed, dtype)
        # the window is over token positions: cached index (compacted paths) or length + depth
        depth = attention.to(self.device).sum(-1) - 1 if attention is not None else None
        new = self.length + (depth if depth is not None else torch.arange(n, device=self.device))
        keys = torch.cat([torch.arange(self.length, device=self.device), new])
        sliding = allowed & ((new.view(-1, 1) - keys.view(1, -1)) < window).unsqueeze(0)
        if all_sliding:
            return _additive(sliding, dtype)
        return {
            "full_attention": _additive(allowed, dtype),
            "sliding_attention": _additive(sliding, dtype),
        }

    def _sparse_mask(self, rows: int, n: int, attention, past, dtype) -> torch.Tensor:
        """`_additive(_allowed(...))` written straight into the few columns it restricts (the
        prompt's left padding, `past`'s, the new tokens') instead of built over the whole cache;
        for rows without padding or after the prefill (no query is then a padding position)."""
        low = torch.finfo(dtype).min
        total = self.length + n
        # on a GPU, SDPA's memory-efficient kernel copies a mask whose rows are not aligned to
        # 16 elements into a padded one, in every layer: give it aligned rows once
        stored = -(-total // 16) * 16 if self.device.type == "cuda" else total
        if self.padded:
            mask = torch.zeros(rows, 1, n, stored, dtype=dtype, device=self.device)[..., :total]
            width = self.pad_keys.shape[-1]
            mask[:, 0, :, :width].masked_fill_(self.pad_keys.unsqueeze(1), low)
        else:
            mask = torch.zeros(1, 1, n, stored, dtype=dtype, device=self.device)[..., :total]
        if attention is None:
            mask[:, 0, :, self.length :] = self._causal_block(n, dtype)
        else:
            mask[:, 0, :, self.length :].masked_fill_(~attention.to(self.device).bool(), low)
        if past is not None:
            seen = mask[:, 0, :, self.length - past.shape[1] : self.length]
            seen.masked_fill_(~past.to(self.device).bool(), low)
        return mask.expand(rows, -1, -1, -1)

    def _causal_block(self, n: int, dtype) -> torch.Tensor:
        """The additive causal mask [n, n] of n new tokens among themselves; cached for the
        few small n of drafting and verification, not for prompts (whose lengths vary)."""
        key = (n, dtype)
        block = self.causal_blocks.get(key)
        if block is None:
            new = torch.ones(n, n, dtype=torch.bool, device=self.device).tril()
            block = _additive(new.unsqueeze(0), dtype)[0, 0]
            if n <= CACHED_BLOCK:
                self.causal_blocks[key] = block
        return block

    def _allowed(self, rows: int, n: int, attention, past, blocks) -> torch.Tensor:
        """Which keys each new token may attend to, [B, n, cache + n] bool: padding hidden,
        new tokens causal or tree, image blocks (prefill) bidirectional."""
        total = self.length + n
        new = attention if attention is not None else torch.ones(n, n, device=self.device).tril()
        allowed = torch.ones(rows, n, total, dtype=torch.bool, device=self.device)
        allowed[:, :, self.length :] = new.to(self.device).bool()
        if past is not None:
            allowed[:, :, self.length - past.shape[1] : self.length] = past.to(self.device).bool()
        if blocks is not None:  # prefill: the cache is empty, the blocks index the new tokens
            same = (blocks.unsqueeze(2) == blocks.unsqueeze(1)) & (blocks >= 0).unsqueeze(2)
            allowed |= same
        keys = torch.arange(total, device=self.device)
        allowed &= keys.view(1, 1, -1) >= self.pad.view(-1, 1, 1)
        # a padding position attends to itself only, so no query row is fully masked
        diagonal = torch.arange(n, device=self.device)
        allowed[:, diagonal, self.length + diagonal] = True
        return allowed

    def truncate(self, length: int) -> None:
        """Drop cached positions beyond `length` (rejected draft tokens)."""
        if length < self.length:
            # DynamicCache.crop takes a negative count to remove in transformers 5.
            self.cache.crop(length - self.length)
            self.length = length

    @inference_mode
    def keep(self, base: int, offsets: list[int]) -> None:
        """Keep cached positions [0, base) plus base + offsets (a tree path), compacted in order."""
        if offsets == list(range(len(offsets))):
            self.truncate(base + len(offsets))
            return
        index = torch.tensor(
            list(range(base)) + [base + o for o in offsets], device=self.device, dtype=torch.long
        )
        for layer in self.cache.layers:
            at = index.to(layer.keys.device)  # each layer's cache lives on its layer's device
            if hasattr(layer, "compact"):
                layer.compact(at)
            else:
                layer.keys = layer.keys.index_select(-2, at)
                layer.values = layer.values.index_select(-2, at)
        self.length = len(index)


CACHED_BLOCK = 128  # largest causal block kept between forwards (a step's tokens, not a prompt)


def _additive(allowed: torch.Tensor, dtype) -> torch.Tensor:
    """A bool mask [B, n, k] as the additive 4D mask [B, 1, n, k] HF attention takes."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.unsqueeze(1)
