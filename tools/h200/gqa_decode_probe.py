"""Issue 28, item 3: the round-4 grouped decode kernel (engine/kernels/grouped_decode.py at
59cea15) on the H200. That kernel (its own summation order, masks, chunks) was replaced
in h200e by one that reproduces MLX's bits (tools/h200/gqa_exact_probe.py); this probe
runs against the round-4 code only (check out 59cea15 to rerun it).

Per shape: random inputs in the model dtype, keys and values a view of a wider buffer
(as BatchKV serves them), optionally a bool mask with random left padding. Error: max
|out - float32 attention over the same inputs| for the kernel and for MLX's own fused
attention (``mx.fast.scaled_dot_product_attention``, what ``fast`` ran before); time:
us per call (median of 7 rounds of 24 calls, each round one eval and sync). The kernel
passes where its error is at most 1.5x MLX's plus 1e-3; the last line says
``GQA OK yes`` when every shape passed.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/gqa_decode_probe.py
"""

from __future__ import annotations

import statistics
import time

import mlx.core as mx

from batchlab.engine.kernels import grouped_decode as gd

# (name, B, query heads, KV heads, head dim, keys, buffer width, masked, dtype)
SHAPES = [
    ("llama-3.1-8b", 256, 32, 8, 128, 192, 512, False, mx.bfloat16),
    ("llama-3.1-8b", 256, 32, 8, 128, 256, 512, True, mx.bfloat16),
    ("llama-3.1-8b", 1, 32, 8, 128, 256, 512, False, mx.bfloat16),
    ("llama-3.1-8b", 32, 32, 8, 128, 2112, 2304, False, mx.bfloat16),
    ("llama-3.2-1b", 1, 32, 8, 64, 256, 512, False, mx.bfloat16),
    ("llama-3.2-1b", 64, 32, 8, 64, 192, 512, True, mx.bfloat16),
    ("llama-3.2-1b", 256, 32, 8, 64, 192, 512, False, mx.bfloat16),
    ("qwen3-0.6b", 1, 16, 8, 128, 256, 512, False, mx.bfloat16),
    ("zoo float32, G=1", 4, 4, 4, 64, 100, 256, True, mx.float32),
]


SDPA = mx.fast.scaled_dot_product_attention


def timed(fn, n=24, rounds=7) -> float:
    mx.eval([fn() for _ in range(4)])
    mx.synchronize()
    per = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([fn() for _ in range(n)])
        mx.synchronize()
        per.append((time.perf_counter() - start) / n)
    return statistics.median(per)


def reference(q, k, v, scale, mask):
    s = (q.astype(mx.float32) * scale) @ mx.repeat(k.astype(mx.float32), q.shape[1] // k.shape[1],
                                                    axis=1).swapaxes(-1, -2)
    if mask is not None:
        s = mx.where(mask, s, -mx.inf)
    p = mx.softmax(s, axis=-1)
    return p @ mx.repeat(v.astype(mx.float32), q.shape[1] // v.shape[1], axis=1)


def main() -> None:
    mx.random.seed(0)
    ok_all = True
    print(f"{'shape':18s} {'B':>4s} {'keys':>5s} {'mask':>5s} {'err kernel':>11s} "
          f"{'err MLX':>9s} {'kernel us':>10s} {'MLX us':>8s} {'MB':>7s} {'GB/s':>6s}")
    for name, b, hq, hkv, dim, keys, width, masked, dt in SHAPES:
        q = mx.random.normal((b, hq, 1, dim)).astype(dt)
        kbuf = mx.random.normal((b, hkv, width, dim)).astype(dt)
        vbuf = mx.random.normal((b, hkv, width, dim)).astype(dt)
        k, v = kbuf[:, :, :keys], vbuf[:, :, :keys]
        mask = None
        if masked:
            pad = mx.random.randint(0, keys // 2, (b,))
            mask = (mx.arange(keys)[None] >= pad[:, None])[:, None, None, :]
        scale = dim ** -0.5
        mx.eval(q, kbuf, vbuf, mask)
        assert gd.fits(q, k, v, mask, None), name
        ref = reference(q, k, v, scale, mask)
        out = gd.grouped_decode_attention(q, k, v, scale, mask)
        mlx = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
        err = mx.abs(out.astype(mx.float32) - ref).max().item()
        err_mlx = mx.abs(mlx.astype(mx.float32) - ref).max().item()
        us = timed(lambda q=q, k=k, v=v, m=mask, s=scale: gd.grouped_decode_attention(
            q, k, v, s, m))
        us_mlx = timed(lambda q=q, k=k, v=v, m=mask, s=scale: SDPA(q, k, v, scale=s, mask=m))
        nbytes = 2 * b * hkv * keys * dim * dt.size
        ok = err <= 1.5 * err_mlx + 1e-3
        ok_all &= ok
        print(f"{name:18s} {b:4d} {keys:5d} {str(masked):>5s} {err:11.2e} {err_mlx:9.2e} "
              f"{us * 1e6:10.1f} {us_mlx * 1e6:8.1f} {nbytes / 1e6:7.1f} "
              f"{nbytes / us / 1e9:6.0f}{'' if ok else '  FAIL'}", flush=True)
    print(f"GQA OK {'yes' if ok_all else 'no'}")


if __name__ == "__main__":
    main()
