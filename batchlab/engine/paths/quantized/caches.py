"""The quantized paths' batch caches: attention layers quantized by a plan, the rest l1's.

A plan is one ``KVQuant`` per attention cache of the model, in the order of the
KVCache / RotatingKVCache leaves of ``make_cache()`` (CacheList parts in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mlx import nn
from mlx_lm.models.cache import CacheList, KVCache, RotatingKVCache

from batchlab.backend import on_cuda
from batchlab.engine.caches.state import BatchList
from batchlab.engine.core import layers
from batchlab.engine.kernels.attention_dispatch import install_dispatch
from batchlab.engine.paths.quantized.kv import BatchQuantizedKV, KVQuant
from batchlab.engine.paths.quantized.ring import BatchQuantizedRing


def attention_templates(model: nn.Module) -> list:
    return [c for c in layers.leaves(layers.single_caches(model))
            if type(c) in (KVCache, RotatingKVCache)]


def count_attention_caches(model: nn.Module) -> int:
    return len(attention_templates(model))


def quantized_caches(model: nn.Module, left_padding: list[int], plan: list[KVQuant],
                     kv_class: type = BatchQuantizedKV) -> list:
    """Empty batch caches for one batch: attention caches quantized by ``plan``."""
    if on_cuda():  # not gated: gpu only
        install_dispatch()  # mlx-lm's quantized attention has no CUDA kernel
    quants = iter(plan)

    def build(template):
        kind = type(template)
        if kind is KVCache:
            return kv_class(left_padding, next(quants))
        if kind is RotatingKVCache:  # one way: no hybrid kv
            return BatchQuantizedRing(template.max_size, left_padding, next(quants))
        if kind is CacheList:  # not gated: no hybrid kv
            return BatchList(*(build(c) for c in template.caches))
        return layers.batch_cache_for(template, left_padding)  # not gated: no hybrid kv

    return layers.share_uploads([build(c) for c in layers.single_caches(model)])


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantizedCaches:
    """A quantized path's ``caches`` (``core/factory.py``): fresh rows get caches
    quantized by ``plan``; rows with history get their single-row caches quantized and
    merged (mlx-lm QuantizedKVCache rows as they are, KVCache rows packed here)."""

    plan: tuple[KVQuant, ...]
    kv_class: type = BatchQuantizedKV

    def fresh(self, model: nn.Module, n: int) -> list:
        return quantized_caches(model, [0] * n, list(self.plan), self.kv_class)

    def merged(self, model: nn.Module, per_row: Sequence[Sequence]) -> list:
        layers.refuse_unbatchable(model)
        if on_cuda():  # not gated: gpu only
            install_dispatch()
        quants = iter(self.plan)

        def merge(rows: list, template):
            kind = type(template)
            if kind is KVCache:
                return self.kv_class.merge_quantized(rows, next(quants))
            if kind is RotatingKVCache:
                return BatchQuantizedRing.merge_quantized(rows, next(quants))
            if kind is CacheList:  # not gated: no hybrid kv
                return BatchList(*(merge(list(parts), t) for parts, t in
                                   zip(zip(*(r.caches for r in rows)), template.caches)))
            return layers.merge_rows(rows)  # not gated: no hybrid kv

        templates = layers.single_caches(model)
        return layers.share_uploads([merge(list(rows), t)
                                     for rows, t in zip(zip(*per_row), templates)])
