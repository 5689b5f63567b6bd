"""A KV cache that grows into preallocated memory instead of concatenating at every step.

transformers' DynamicLayer appends with torch.cat, copying the whole cache at every forward: for
a draft with hundreds of visual tokens (and an ensemble's several rows) that copy costs as much as
the forward itself. `GrowingLayer` writes new keys/values into spare capacity (doubling when
full; the first allocation a prefill and a quarter, at least FIRST_ROOM more) and exposes the
filled part as a view; `compact` keeps a subset of positions in place (accepted tree paths).
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

FIRST_ROOM = 256  # positions past a prefill before the first copy: a toy decode and its trees


class GrowingLayer(DynamicLayer):
    """A DynamicLayer with amortised O(new tokens) appends."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.buffer_k = self.buffer_v = None
        self.filled = 0

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.filled + key_states.shape[-2]
        if self.buffer_k is None or end > self.buffer_k.shape[-2]:
            self._grow(key_states, value_states, end)
        self.buffer_k[..., self.filled : end, :] = key_states
        self.buffer_v[..., self.filled : end, :] = value_states
        self._expose(end)
        return self.keys, self.values

    def _grow(self, key_states, value_states, needed: int) -> None:
        old = 0 if self.buffer_k is None else self.buffer_k.shape[-2]
        # the first allocation (a prefill) leaves room to decode, so that the first steps after
        # a prompt cost what later steps cost (no copy of the prompt's cache at step one); a
        # quarter more, not double, so that a long visual prompt's cache does not double memory
        capacity = max(needed, 2 * old, 64) if old else needed + max(FIRST_ROOM, needed // 4)
        new_k = key_states.new_empty((*key_states.shape[:-2], capacity, key_states.shape[-1]))
        new_v = value_states.new_empty((*value_states.shape[:-2], capacity, value_states.shape[-1]))
        if self.filled:
            new_k[..., : self.filled, :] = self.buffer_k[..., : self.filled, :]
            new_v[..., : self.filled, :] = self.buffer_v[..., : self.filled, :]
        self.buffer_k, self.buffer_v = new_k, new_v

    def _expose(self, length: int) -> None:
        self.filled = length
        self.keys = self.buffer_k[..., :length, :]
        self.values = self.buffer_v[..., :length, :]

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last `-tokens_to_remove` positions (transformers 5 passes a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        if tokens_to_remove and self.is_initialized:
            self._expose(self.filled + tokens_to_remove)

    def __deepcopy__(self, memo: dict) -> GrowingLayer:
        """A copy with buffers of its own and the filled part exposed on them anew: deep-copying
        the views themselves (`Tensor.__deepcopy__`) costs several times the buffers' clone, and
        exact enumeration forks caches thousands of times."""
        copied = object.__new__(type(self))
        memo[id(self)] = copied
        views = ("keys", "values") if getattr(self, "buffer_k", None) is not None else ()
        for name, value in self.__dict__.items():
            if name not in views:
                setattr(copied, name, copy.deepcopy(value, memo))
        if views:
            copied._expose(self.filled)
        return copied

    def compact(self, index: torch.Tensor) -> None:
        """Keep positions `index` (increasing), moved to the front in order."""
        kept_k = self.keys.index_select(-2, index)
        kept_v = self.values.index_select(-2, index)
        self.buffer_k[..., : len(index), :] = kept_k
        self.buffer_v[..., : len(index), :] = kept_v
        self._expose(len(index))


def new_cache(config) -> DynamicCache:
    """A DynamicCache of growing layers only.

    Sliding-window layers keep their whole history too (the decoder's masks apply the window):
    transformers' sliding layers drop old positions, which tree compaction and rollback of
    rejected tokens cannot undo.
    """
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache
