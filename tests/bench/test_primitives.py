"""Micro-benchmarks of the engine's per-step primitives (pytest-benchmark).

Skipped by a plain ``pytest`` (pyproject's ``--benchmark-skip``); run them with

    pytest tests/bench --benchmark-enable --benchmark-only

Shapes are one layer of a Llama-3.2-1B-like model (8 KV heads of 64, bf16) at 256
columns of context. Every timed call ends in ``mx.eval``: MLX is lazy, and an unevaluated
graph would time only its construction. The asserts check shapes, never times.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.cache import KVCache

from batchlab.engine.caches.kv import BatchKV
from batchlab.engine.caches.mask import DecodeMasks, causal_mask
from batchlab.engine.caches.ring import BatchRing

H, D, L = 8, 64, 256
SIZES = [8, 64]


def _kv(batch: int, cols: int) -> tuple[mx.array, mx.array]:
    k = mx.random.normal((batch, H, cols, D)).astype(mx.bfloat16)
    v = mx.random.normal((batch, H, cols, D)).astype(mx.bfloat16)
    mx.eval(k, v)
    return k, v


def _rows(batch: int) -> list[KVCache]:
    """Single-row caches of ragged sizes L/2 .. L, as extract() hands them to merge."""
    rows = []
    for size in np.linspace(L // 2, L, batch).astype(int):
        cache = KVCache()
        cache.update_and_fetch(*_kv(1, int(size)))
        rows.append(cache)
    mx.eval([c.state for c in rows])
    return rows


def _batch(batch: int) -> BatchKV:
    cache = BatchKV.merge(_rows(batch))
    mx.eval(cache.keys, cache.values)
    return cache


@pytest.mark.parametrize("batch", SIZES)
def test_mask_decode(benchmark, batch):
    """The (B, 1, 1, L+1) decode mask built from scratch (``causal_mask``)."""
    padding = np.arange(batch) % 17

    def build():
        mask = causal_mask(1, L, left_padding=padding)
        mx.eval(mask)
        return mask

    assert benchmark(build).shape == (batch, 1, 1, L + 1)


@pytest.mark.parametrize("batch", SIZES)
def test_mask_decode_sliced(benchmark, batch):
    """The same mask as a decode step makes it (``DecodeMasks``: a slice of a host mask
    kept per left-padding array, then uploaded)."""
    padding = np.arange(batch) % 17
    padding.flags.writeable = False
    masks = DecodeMasks()

    def build():
        mask = masks(L, padding)
        mx.eval(mask)
        return mask

    assert benchmark(build).shape == (batch, 1, 1, L + 1)


@pytest.mark.parametrize("batch", SIZES)
def test_merge(benchmark, batch):
    rows = _rows(batch)

    def merge():
        cache = BatchKV.merge(rows)
        mx.eval(cache.keys, cache.values)
        return cache

    assert benchmark(merge).keys.shape == (batch, H, L, D)


@pytest.mark.parametrize("batch", SIZES)
def test_filter_half(benchmark, batch):
    """Evict every other row (filter also trims the padding the kept rows share)."""
    keep = list(range(0, batch, 2))

    def run(cache):
        cache.filter(keep)
        mx.eval(cache.keys, cache.values)
        return cache

    result = benchmark.pedantic(run, setup=lambda: ((_batch(batch),), {}), rounds=20)
    assert result.keys.shape[0] == len(keep)


@pytest.mark.parametrize("batch", SIZES)
def test_extend(benchmark, batch):
    """Join B/2 rows onto B/2 running rows (both sides padded to a common write column)."""

    def setup():
        return (_batch(batch // 2), _batch(batch // 2)), {}

    def run(cache, other):
        cache.extend(other)
        mx.eval(cache.keys, cache.values)
        return cache

    result = benchmark.pedantic(run, setup=setup, rounds=20)
    assert result.keys.shape[0] == batch


@pytest.mark.parametrize("batch", SIZES)
def test_ring_decode_update(benchmark, batch):
    """One decode write into a full, rotating window of 256 (pointer wraps around)."""
    ring = BatchRing(L, [0] * batch)
    ring.update_and_fetch(*_kv(batch, L))
    key, value = _kv(batch, 1)

    def write():
        keys, values = ring.update_and_fetch(key, value)
        mx.eval(keys, values)
        return keys

    assert benchmark(write).shape == (batch, H, L, D)
    assert ring.rotated


@pytest.mark.parametrize("batch", SIZES)
def test_offset_upload(benchmark, batch):
    """Host row ints -> the int32 device array RoPE reads (once per layer per step)."""
    cache = BatchKV(list(range(batch)))

    def upload():
        cache.offset = cache.offset_host + 1
        offset = cache.offset
        mx.eval(offset)
        return offset

    assert benchmark(upload).shape == (batch,)


@pytest.mark.parametrize("batch", SIZES)
def test_split_logprobs(benchmark, batch):
    """``list(logprobs)``: the per-row (V,) views BatchGenerator makes every step (the l1
    scheduler keeps one (B, V) array; this is the cost it saves)."""
    logprobs = mx.random.normal((batch, 128256)).astype(mx.bfloat16)
    mx.eval(logprobs)
    assert len(benchmark(list, logprobs)) == batch
