"""The lean Llama forward computes what transformers' forward computes, bit for bit on CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mmspec.decoding.decoder import Decoder


def _llama(kv_heads: int = 4, **extra) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        **extra,
    )
    return LlamaForCausalLM(config).eval()


def _pair(model) -> tuple[Decoder, Decoder]:
    reference, lean = Decoder(model, lean=False), Decoder(model)
    assert reference.lean is None and lean.lean is not None
    return reference, lean


def _same(a, b) -> None:
    assert torch.equal(a.logits, b.logits)
    assert torch.equal(a.hidden, b.hidden)
    assert a.layers.keys() == b.layers.keys()
    for k in a.layers:
        assert torch.equal(a.layers[k], b.layers[k]), k


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_lean_forward_equals_transformers_on_every_call_kind(kv_heads):
    model = _llama(kv_heads)
    reference, lean = _pair(model)
    g = torch.Generator().manual_seed(1)
    rows = [torch.randn(21, 64, generator=g), torch.randn(13, 64, generator=g)]  # left-padded
    layers = (0, 2, 3)
    _same(reference.prefill(rows, layers=layers), lean.prefill(rows, layers=layers))
    _same(reference.extend([5]), lean.extend([5]))  # one token
    _same(reference.extend([6, 7, 8]), lean.extend([6, 7, 8]))  # a chain (causal)
    tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]).bool()
    past = torch.tensor([[True, False, True]] * 4)
    _same(
        reference.extend([9, 10, 11, 12], tree, past, layers=(1,)),
        lean.extend([9, 10, 11, 12], tree, past, layers=(1,)),
    )
    for decoder in (reference, lean):
        decoder.keep(decoder.length - 4, [0, 1, 3])
    _same(reference.extend([13]), lean.extend([13]))
    one = torch.randn(9, 64, generator=g)  # one row, no padding: transformers' causal kernel
    _same(reference.prefill(one), lean.prefill(one))
    assert lean._consecutive()  # plain tokens now take the short path: table slice, causal block
    _same(reference.extend([3, 4]), lean.extend([3, 4]))
    _same(reference.extend([5]), lean.extend([5]))
    _same(reference.extend([6, 7, 8]), lean.extend([6, 7, 8]))
    same_length = [torch.randn(7, 64, generator=g), torch.randn(7, 64, generator=g)]
    _same(reference.prefill(same_length), lean.prefill(same_length))  # two rows, no padding
    assert lean._consecutive()
    _same(reference.extend([1]), lean.extend([1]))
    _same(reference.extend([2, 3]), lean.extend([2, 3]))


def test_model_forward_unchanged_by_fused_weights():
    model = _llama()
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        before = model(ids).logits
        Decoder(model)  # fuses q/k/v and gate/up into views of one tensor
        Decoder(model)  # a second decoder over the same model reuses them
        after = model(ids).logits
    assert torch.equal(before, after)
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.weight.data_ptr() == attn.q_proj.weight.data_ptr() + 64 * 64 * 4


def test_unsupported_stacks_keep_transformers_forward():
    assert Decoder(_llama(attention_bias=True)).lean is None
    assert Decoder(_llama(hidden_act="gelu")).lean is None


@pytest.mark.parametrize("padded", [True, False])
def test_sparse_masks_equal_the_full_construction(padded):
    """The masks written column by column equal `_additive(_allowed(...))` over the whole cache."""
    from mmspec.decoding.decoder import _additive

    decoder = Decoder(_llama())
    g = torch.Generator().manual_seed(2)
    rows = [torch.randn(11, 64, generator=g), torch.randn(11 - 4 * padded, 64, generator=g)]
    decoder.prefill(rows)
    decoder.extend([4, 5])
    assert decoder.padded == padded
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]]).bool()
    past = torch.tensor([[True, False], [False, True], [True, True]])
    for n, attention, past_ in [(1, None, None), (3, None, None), (3, tree, past), (3, tree, None)]:
        for dtype in (torch.float32, torch.bfloat16):
            full = _additive(decoder._allowed(2, n, attention, past_, None), dtype)
            sparse = decoder._sparse_mask(2, n, attention, past_, dtype)
            assert sparse.shape == full.shape and sparse.dtype == dtype
            assert torch.equal(sparse, full), (n, attention is not None, past_ is not None)


def test_causal_blocks_cache_only_step_sized_blocks():
    """Prompts of many lengths must not each leave an L x L mask behind (memory would grow with
    every sample); the few block sizes of drafting and verification are kept."""
    from mmspec.decoding.decoder import CACHED_BLOCK

    decoder = Decoder(_llama())
    g = torch.Generator().manual_seed(3)
    for length in (CACHED_BLOCK + 5, CACHED_BLOCK + 9, CACHED_BLOCK + 60):
        decoder.prefill(torch.randn(length, 64, generator=g))
        decoder.extend([1, 2, 3])
    assert {n for n, _ in decoder.causal_blocks} == {3}
