"""A lean forward of Llama decoder stacks: the same weights and arithmetic as transformers'
`LlamaModel.forward`, in a third of the Python operations.

At the toy models' size (and for any model on a GPU at batch 1) a decoding step costs its
operations' dispatch, not their arithmetic: transformers' forward adds output-capture hooks,
mask construction, config lookups and three projections where one would do. Here each layer runs
one fused q/k/v projection (the three weights become views of one tensor, so no memory is added
and the model's own forward still works), rotary embedding of q and k together, SDPA over the
decoder's growing cache, and one fused gate/up projection. Models this does not cover (other
architectures, biases, models split over devices) keep transformers' forward.
"""

from __future__ import annotations

from mmspec.decoding.lazy import F, torch

# decoder stacks whose forward this reproduces (DREAM's head: two Llama layers around its
# cross-attention block, which the stack runs between them: `between`)
STACKS = ("LlamaModel", "DreamStack")


def supports(model, stack) -> bool:
    """Whether `stack` (the language model of `model`) can run the lean forward."""
    config = stack.config
    return (
        type(stack).__name__ in STACKS
        and getattr(config, "hidden_act", None) == "silu"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "pretraining_tp", 1) in (None, 1)
        and not getattr(model, "hf_device_map", None)  # accelerate hooks move inputs per layer
    )


def _fuse(owner: torch.nn.Module, modules: list[torch.nn.Linear]) -> torch.Tensor:
    """One weight [sum of outputs, in] whose row blocks are the modules' weights (made views of
    it, so the model's own forward reads the same memory); kept on `owner` for later stacks."""
    fused = getattr(owner, "_lean_fused", None)
    if fused is not None and modules[0].weight.data_ptr() == fused.data_ptr():
        return fused
    fused = torch.cat([m.weight.detach() for m in modules])
    start = 0
    for m in modules:
        rows = m.weight.shape[0]
        m.weight = torch.nn.Parameter(fused[start : start + rows], requires_grad=False)
        start += rows
    owner._lean_fused = fused
    return fused


def _norm_parts(norm) -> tuple | None:
    """(weight, its shape, epsilon) of an RMSNorm, looked up once rather than per step; None
    for a layer without that norm (an `Identity`: the first block of DREAM's head)."""
    if isinstance(norm, torch.nn.Identity):
        return None
    return norm.weight, tuple(norm.weight.shape), norm.variance_epsilon


def rms_norm(x: torch.Tensor, norm) -> torch.Tensor:
    """An RMSNorm module's arithmetic (`LeanStack._norm`), without the module call."""
    return LeanStack._norm(x, _norm_parts(norm))


class LeanStack:
    """The forward of one Llama stack over a `DynamicCache` of `GrowingLayer`s."""

    def __init__(self, stack):
        config = stack.config
        self.stack = stack
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        self.rope_table = None  # (cos, sin) [max positions, head_dim], made on first use
        self.final_norm = _norm_parts(stack.norm)
        # layer index -> a callable (x, position_ids [B, n]) -> x run before that layer
        self.between = stack.lean_between() if hasattr(stack, "lean_between") else {}
        self.layers = []
        for layer in stack.layers:
            attn, mlp = layer.self_attn, layer.mlp
            # an attention-only layer (Kangaroo's adapter: its MLP has no weights) skips the block
            feed_forward = (None, None, None)
            if hasattr(mlp, "gate_proj"):
                feed_forward = (
                    _norm_parts(layer.post_attention_layernorm),
                    _fuse(mlp, [mlp.gate_proj, mlp.up_proj]),
                    mlp.down_proj.weight,
                )
            self.layers.append(
                (
                    _norm_parts(layer.input_layernorm),
                    _fuse(attn, [attn.q_proj, attn.k_proj, attn.v_proj]),
                    attn.o_proj.weight,
                    *feed_forward,
                )
            )

    def __deepcopy__(self, memo) -> LeanStack:
        """Itself: it holds the model's weights (some fused into new tensors) and a table of
        rotary rows, and no decoding state, so copies of a decoding's state (`mmspec
        verify-lossless` forks one per outcome) share it as they share the model."""
        return self

    @staticmethod
    def _norm(x: torch.Tensor, norm: tuple) -> torch.Tensor:
        weight, shape, eps = norm
        if x.dtype == torch.float32:  # one fused kernel, the same arithmetic in float32
            return F.rms_norm(x, shape, weight, eps)
        # LlamaRMSNorm's arithmetic, step for step (float32 statistics, weight after the cast)
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x32.to(x.dtype)

    def _rotary(self, embeds, position_ids, start=None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [B or 1, 1, n, head_dim] of the positions (`position_ids` [B, n], or the
        n consecutive ones from `start`): rows of a table computed once, with the rotary
        module's arithmetic (default RoPE); other RoPE types call the module."""
        n = embeds.shape[1]
        rotary = self.stack.rotary_emb
        if rotary.rope_type != "default":
            if position_ids is None:
                position_ids = torch.arange(start, start + n, device=embeds.device).view(1, -1)
            cos, sin = rotary(embeds, position_ids)
            return cos.unsqueeze(1), sin.unsqueeze(1)
        if self.rope_table is None or self.rope_table[0].device != embeds.device:
            positions = torch.arange(
                self.stack.config.max_position_embeddings, device=embeds.device
            )
            cos, sin = rotary(embeds, positions.unsqueeze(0))
            self.rope_table = (cos[0], sin[0])
        if self.rope_table[0].dtype != embeds.dtype:
            self.rope_table = tuple(t.to(embeds.dtype) for t in self.rope_table)
        cos, sin = self.rope_table
        if start is not None:  # a slice: no gather
            rows = slice(start, start + n)
            return cos[rows].view(1, 1, n, -1), sin[rows].view(1, 1, n, -1)
        return cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)

    def _attend(self, query, keys, values, mask) -> torch.Tensor:
        """SDPA as transformers' sdpa_attention_forward calls it, grouped-query cases included
        (one query: heads packed per key/value head; with a mask: keys repeated)."""
        groups = self.heads // self.kv_heads
        if groups == 1 or mask is None:
            return F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=groups > 1
            )
        rows, _, n, dim = query.shape
        if n == 1:
            packed = query.reshape(rows, self.kv_heads, groups, dim)
            out = F.scaled_dot_product_attention(
                packed, keys, values, attn_mask=mask, scale=self.scale
            )
            return out.reshape(rows, self.heads, 1, dim)
        keys = keys.repeat_interleave(groups, dim=1)
        values = values.repeat_interleave(groups, dim=1)
        return F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=self.scale)

    def __call__(self, embeds, mask, position_ids, cache, layers=(), start=None) -> tuple:
        """(final-normed hidden [B, n, H], {k: hidden_states[k]} as transformers numbers them:
        0 the inputs, i the output of layer i, the last one normed). Positions: `position_ids`
        [B, n], or None and the n consecutive positions from `start` in every row."""
        rows, n, _ = embeds.shape
        cos, sin = self._rotary(embeds, position_ids, start)
        half = self.head_dim // 2
        q_kv = self.heads + self.kv_heads
        last = len(self.layers)
        wanted = {k % (last + 1): k for k in layers}  # index -> the key the caller used
        states = {wanted[0]: embeds} if 0 in wanted else {}
        x = embeds
        for i, (norm1, qkv_w, o_w, norm2, gate_up_w, down_w) in enumerate(self.layers):
            if i in self.between:
                if position_ids is None:
                    position_ids = torch.arange(start, start + n, device=x.device).view(1, -1)
                x = self.between[i](x, position_ids)
            h = x if norm1 is None else self._norm(x, norm1)
            qkv = F.linear(h, qkv_w).view(rows, n, -1, self.head_dim).transpose(1, 2)
            qk, v = qkv[:, :q_kv], qkv[:, q_kv:]
            rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = qk * cos + rotated * sin
            keys, values = cache.layers[i].update(qk[:, self.heads :], v)
            attn = self._attend(qk[:, : self.heads], keys, values, mask)
            x = x + F.linear(attn.transpose(1, 2).reshape(rows, n, -1), o_w)
            if gate_up_w is not None:
                gate, up = F.linear(self._norm(x, norm2), gate_up_w).chunk(2, dim=-1)
                x = x + F.linear(F.silu(gate) * up, down_w)
            if i + 1 in wanted and i + 1 < last:
                states[wanted[i + 1]] = x
        x = self._norm(x, self.final_norm)
        if last in wanted:
            states[wanted[last]] = x
        return x, states
