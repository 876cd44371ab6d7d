"""The invariant path's batched prefill: each row's key span and its attention (issue 28).

Exact values: the spans a right-padded chunk hands the kernel, and the attention of a
padded batch against a float64 reference per row (causal over the row's own keys, zeros
for padding queries). The solo gate (matrices/invariant.toml, invariant-blocked cells of
the default matrix) checks each row against its prefill alone; this checks both compute
attention at all.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from batchlab.engine.core.factory import BatchCaches
from batchlab.engine.kernels.row_prefill import row_prefill_attention
from batchlab.engine.paths.invariant.path import RowKV, prefills_together
from batchlab.zoo import load


def test_prefill_spans_of_a_right_padded_chunk_then_a_second_chunk():
    cache = RowKV([0, 0])
    cache.prepare(lengths=[2, 1], right_padding=[0, 1])
    k = mx.zeros((2, 1, 2, 4))
    cache.update_and_fetch(k, k)
    assert cache.prefill_spans(2) == ((0, 0), (2, 1), (2, 1))
    cache.finalize()  # [5 6] [_ 7]
    cache.prepare(lengths=[1, 3], right_padding=[2, 0])
    cache.update_and_fetch(mx.zeros((2, 1, 3, 4)), mx.zeros((2, 1, 3, 4)))
    # row 0: keys 0..3 (2 old + 1 new), 1 query; row 1: keys 1..5 (1 old + 3 new)
    assert cache.prefill_spans(3) == ((0, 1), (3, 5), (1, 3))


def _reference(q, k, v, first, end, count, scale):
    q, k, v = (np.array(a.astype(mx.float32), dtype=np.float64) for a in (q, k, v))
    keys, values = k[:, first:end], v[:, first:end]  # (H, n, D)
    n = end - first
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    for i in range(count):
        visible = n - (count - 1 - i)
        s = np.einsum("hd,hkd->hk", q[:, i], keys[:, :visible]) * scale
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out[:, i] = np.einsum("hk,hkd->hd", p, values[:, :visible])
    return out


def test_row_prefill_attention_is_causal_over_each_rows_own_keys():
    mx.random.seed(3)
    B, H, N, W, D = 3, 2, 4, 9, 8
    q = mx.random.normal((B, H, N, D))
    k = mx.random.normal((B, H, W, D))
    v = mx.random.normal((B, H, W, D))
    first, ends, counts = (0, 2, 5), (9, 7, 8), (4, 1, 3)
    out = row_prefill_attention(q, k, v, first, ends, counts, scale=0.5)
    assert out.shape == (B, H, N, D)
    for b in range(B):
        want = _reference(q[b], k[b], v[b], first[b], ends[b], counts[b], 0.5)
        got = np.array(out[b], dtype=np.float64)
        np.testing.assert_allclose(got[:, : counts[b]], want[:, : counts[b]], atol=1e-5)
        assert not got[:, counts[b] :].any()  # padding queries: zeros


def test_full_attention_models_prefill_together_and_windowed_ones_alone():
    caches = BatchCaches(kv_class=RowKV)
    assert prefills_together(load("llama").model, caches)
    assert not prefills_together(load("mamba2").model, caches)
