"""Which ops give a row the same bits alone and in a batch, on this backend (issue 20).

    PYTHONPATH=. python tools/probes/cuda_ops.py

For each op: row ``r``'s result computed alone (B = 1) and inside batches of other sizes
at other positions, with neighbours of random contents; "same" means equal bytes. Also
checks the invariant path's row attention against ``mx.fast.scaled_dot_product_attention``
(max |difference|, its accuracy) and whether mlx-lm's serial ``QuantizedKVCache``
attention runs on this backend at all. Prints one line per probe.
"""

from __future__ import annotations

import sys
import traceback

import mlx.core as mx
import numpy as np

from batchlab.engine.kernels.row_attention import row_attention
from batchlab.engine.paths.invariant.modules import TapConv1d, invariant_module


def same(a: mx.array, b: mx.array) -> bool:
    return np.array(a.astype(mx.float32)).tobytes() == np.array(b.astype(mx.float32)).tobytes()


def batch_probe(name: str, make_row, run, sizes=(1, 2, 3, 8, 16, 64)):
    """``make_row(seed)`` -> one row's inputs (tuple of arrays with a leading 1 axis);
    ``run(*inputs)`` -> outputs with a leading batch axis. Row 0's inputs are put at
    several positions of batches of ``sizes``."""
    mine = make_row(0)
    alone = run(*mine)
    mx.eval(alone)
    differs = []
    for b in sizes:
        for pos in sorted({0, b // 2, b - 1}):
            rows = [make_row(100 * b + i + 1) for i in range(b)]
            rows[pos] = mine
            batch = tuple(mx.concatenate([r[j] for r in rows]) for j in range(len(mine)))
            out = run(*batch)
            mx.eval(out)
            if not same(out[pos : pos + 1], alone):
                differs.append(f"B={b}@{pos}")
    print(f"{name}: " + ("same at every B and position" if not differs
                         else "DIFFERS at " + " ".join(differs)), flush=True)


def rand(shape, dtype, seed):
    return mx.random.normal(shape, key=mx.random.key(seed)).astype(dtype)


def probe_attention(dtype, dq, heads=(8, 2), sinks=False):
    hq, hkv = heads
    sink = rand((hq,), dtype, 7) if sinks else None
    n_mine = 37

    def row_keys(seed, n):
        return rand((1, hkv, n, dq), dtype, seed), rand((1, hkv, n, dq), dtype, seed + 1)

    q0 = rand((1, hq, 1, dq), dtype, 3)
    k0, v0 = row_keys(5, n_mine)
    alone = row_attention(q0, k0, v0, mx.array([0]), dq ** -0.5, sink)
    ref = mx.fast.scaled_dot_product_attention(q0, k0, v0, scale=dq ** -0.5, sinks=sink)
    err = float(mx.abs(alone.astype(mx.float32) - ref.astype(mx.float32)).max())
    differs = []
    for b, width in ((2, 40), (8, 64), (16, 37), (64, 300)):
        for pos in sorted({0, b // 2, b - 1}):
            qs, ks, vs, firsts = [], [], [], []
            for i in range(b):
                q, (k, v), n = ((q0, (k0, v0), n_mine) if i == pos else
                                (rand((1, hq, 1, dq), dtype, 50 + i),
                                 row_keys(60 + i, 1 + (i * 7) % width), 1 + (i * 7) % width))
                pad = width - n
                ks.append(mx.concatenate([rand((1, hkv, pad, dq), dtype, 90 + i), k], axis=2))
                vs.append(mx.concatenate([rand((1, hkv, pad, dq), dtype, 95 + i), v], axis=2))
                qs.append(q)
                firsts.append(pad)
            # a strided view of a bigger buffer, as a cache hands it over
            kb = mx.concatenate([mx.concatenate(ks), mx.zeros((b, hkv, 5, dq), dtype)], axis=2)
            vb = mx.concatenate([mx.concatenate(vs), mx.zeros((b, hkv, 5, dq), dtype)], axis=2)
            out = row_attention(mx.concatenate(qs), kb[:, :, :width], vb[:, :, :width],
                                mx.array(firsts), dq ** -0.5, sink)
            mx.eval(out)
            if not same(out[pos : pos + 1], alone):
                differs.append(f"B={b}@{pos}")
    print(f"row_attention {dtype} D={dq} heads={heads} sinks={sinks}: max |vs fused| {err:.3g}; "
          + ("same at every B, width and position" if not differs
             else "DIFFERS at " + " ".join(differs)), flush=True)


def probe_masked_fused(dtype, dq):
    """The negative control: mx.fast SDPA with a padding mask, row alone vs in a batch."""
    hq = hkv = 4
    n = 37

    def make_row(seed):
        return (rand((1, hq, 1, dq), dtype, seed), rand((1, hkv, n, dq), dtype, seed + 1),
                rand((1, hkv, n, dq), dtype, seed + 2))

    def run(q, k, v, width=64):
        b = q.shape[0]
        pad = width - n
        kk = mx.concatenate([mx.zeros((b, hkv, pad, dq), dtype), k], axis=2)
        vv = mx.concatenate([mx.zeros((b, hkv, pad, dq), dtype), v], axis=2)
        mask = mx.concatenate([mx.zeros((b, 1, 1, pad), mx.bool_),
                               mx.ones((b, 1, 1, n), mx.bool_)], axis=-1)
        return mx.fast.scaled_dot_product_attention(q, kk, vv, scale=dq ** -0.5, mask=mask)

    q, k, v = make_row(0)
    alone = mx.fast.scaled_dot_product_attention(
        q, k, v, scale=dq ** -0.5, mask=mx.ones((1, 1, 1, n), mx.bool_))
    padded = run(q, k, v)
    print(f"masked fused SDPA {dtype} D={dq}: alone (width {n}) vs padded to 64: "
          + ("same" if same(alone, padded) else "DIFFERS"), flush=True)
    batch_probe(f"masked fused SDPA {dtype} D={dq}, padded to 64, across B", make_row, run)


def probe_conv(dtype, channels=96, taps=4, steps=1):
    from mlx import nn
    conv = nn.Conv1d(channels, channels, taps, groups=channels, bias=True)
    conv.update({"weight": conv.weight.astype(dtype), "bias": conv.bias.astype(dtype)})
    tap = TapConv1d(conv)
    make_row = lambda s: (rand((1, taps - 1 + steps, channels), dtype, s),)  # noqa: E731
    batch_probe(f"mx.conv1d depthwise {dtype} C={channels} K={taps} L={steps}", make_row, conv)
    batch_probe(f"TapConv1d {dtype} C={channels} K={taps} L={steps}", make_row, tap)


def probe_ssm(dtype):
    from mlx_lm.models.ssm import ssm_update
    h, dh, g, n = 4, 16, 1, 16
    A_log = rand((h,), mx.float32, 1)
    D = rand((h,), dtype, 2)
    dt_bias = rand((h,), dtype, 3)

    def make_row(s):
        return (rand((1, 1, h, dh), dtype, s), rand((1, 1, g, n), dtype, s + 1),
                rand((1, 1, g, n), dtype, s + 2), rand((1, 1, h), dtype, s + 3),
                rand((1, h, dh, n), dtype, s + 4))

    def run(x, B, C, dt, state):
        y, st = ssm_update(x, A_log, B, C, D, dt, dt_bias, state)
        return mx.concatenate([y.reshape(y.shape[0], -1), st.reshape(st.shape[0], -1)], axis=1)

    batch_probe(f"mlx-lm ssm_update decode {dtype}", make_row, run)


def probe_moe(dtype, tokens=(1, 4, 16, 64)):
    from mlx_lm.models.switch_layers import SwitchGLU
    dim, hidden, experts, k = 64, 96, 8, 2
    moe = SwitchGLU(dim, hidden, experts)
    moe.set_dtype(dtype)
    unsorted = invariant_module(moe)

    def make_row(s):
        x = rand((1, dim), dtype, s)
        idx = mx.array(np.random.default_rng(s).choice(experts, size=(1, k), replace=False),
                       dtype=mx.uint32)
        return x, idx

    batch_probe(f"SwitchGLU (mlx-lm, sorts at >= 64 indices) {dtype}", make_row, moe,
                sizes=(1, 4, 16, 32, 64))
    batch_probe(f"UnsortedSwitchGLU {dtype}", make_row, unsorted, sizes=(1, 4, 16, 32, 64))


def probe_rows(dtype):
    make = lambda s: (rand((1, 49152), dtype, s),)  # noqa: E731
    batch_probe(f"logits - logsumexp, V=49152, {dtype}",
                make, lambda x: x - mx.logsumexp(x, axis=-1, keepdims=True))
    w = rand((576,), dtype, 9)
    batch_probe(f"mx.fast.rms_norm D=576 {dtype}", lambda s: (rand((1, 576), dtype, s),),
                lambda x: mx.fast.rms_norm(x, w, 1e-5))


def probe_mlx_lm_quantized_attention(dtype):
    """mlx-lm's QuantizedKVCache hands attention slices of its buffers; does this
    backend's quantized_matmul take them?"""
    from mlx_lm.models.base import quantized_scaled_dot_product_attention
    from mlx_lm.models.cache import QuantizedKVCache
    cache = QuantizedKVCache(group_size=64, bits=4)
    try:
        for n in (9, 1):
            k = rand((1, 2, n, 64), dtype, n)
            keys, values = cache.update_and_fetch(k, k)
            q = rand((1, 8, n, 64), dtype, 40 + n)
            out = quantized_scaled_dot_product_attention(q, keys, values, scale=0.125,
                                                         mask=None, group_size=64, bits=4)
            mx.eval(out)
        print(f"mlx-lm QuantizedKVCache attention {dtype}: runs", flush=True)
    except Exception as e:  # noqa: BLE001 - the finding is the error
        print(f"mlx-lm QuantizedKVCache attention {dtype}: FAILS: {str(e)[:200]}", flush=True)


def main() -> int:
    print("device:", mx.default_device(), flush=True)
    probes = [
        lambda: [probe_attention(dt, d, heads=h, sinks=s)
                 for dt in (mx.bfloat16, mx.float32) for d in (16, 64, 128)
                 for h in ((8, 2),) for s in (False, True)],
        lambda: [probe_masked_fused(dt, d) for dt in (mx.bfloat16, mx.float32) for d in (16, 64)],
        lambda: [probe_conv(dt) for dt in (mx.bfloat16, mx.float32)],
        lambda: [probe_ssm(dt) for dt in (mx.bfloat16, mx.float32)],
        lambda: probe_moe(mx.float32),
        lambda: probe_moe(mx.bfloat16),
        lambda: [probe_rows(dt) for dt in (mx.bfloat16, mx.float32)],
        lambda: [probe_mlx_lm_quantized_attention(dt) for dt in (mx.bfloat16, mx.float32)],
    ]
    for probe in probes:
        try:
            probe()
        except Exception:  # noqa: BLE001 - report and go on with the other probes
            print("probe failed:\n" + traceback.format_exc(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
