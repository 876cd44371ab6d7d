"""Issue 28: is MLX's decode attention past 256 keys repeatable, and does it read only the
keys it is given?

From 256 keys, a one-query unmasked ``mx.fast.scaled_dot_product_attention`` whose keys
and values are a slice of a buffer grown in steps of 256 (BatchKV's, mlx-lm's KVCache's)
goes to cuDNN on CUDA: MLX hands cuDNN the whole buffer with a padding mask of the
slice's length (``use_cudnn_for_decoding`` and ``unslice_kv`` in
``mlx/backend/cuda/scaled_dot_product_attention.cpp``). The fourteenth round found the
fast path not repeatable past 256 keys at B=256 (``gqa_exact_probe.py repeat``); this
probe takes the engine out and asks the kernel alone, per shape (B, query and KV heads,
head dim, valid keys L in a buffer of width W):

- ``repeat``: the same call on the same arrays five times: every output byte equal;
- ``tail``: the buffer's columns from L on replaced by other random values, then by NaN
  (what a slice never shows): the output must not change;
- ``copy``: the same keys as a contiguous array of width L (so not cuDNN's decode): equal
  or not, for information (a different kernel may round differently).

It prints one line per shape and the outputs' SHA-256, so that a second run of the probe
with ``MLX_CUDA_USE_CUDNN_SDPA=0`` (cuDNN off: MLX's own kernels) can be compared with
this one. ``CUDNN DECODE REPEATABLE yes`` when every ``repeat`` and ``tail`` holds.

    PYTHONPATH=/tmp/site:$PWD python3 tools/h200/cudnn_decode_probe.py
"""

from __future__ import annotations

import hashlib
import os

import mlx.core as mx
import numpy as np

SHAPES = (  # B, query heads, KV heads, head dim, valid keys, buffer width
    (1, 32, 8, 64, 300, 512),
    (8, 32, 8, 64, 300, 512),
    (64, 32, 8, 64, 300, 512),
    (256, 32, 8, 64, 300, 512),
    (256, 32, 8, 128, 300, 512),
    (256, 32, 8, 128, 364, 512),
    (256, 16, 8, 128, 511, 512),
    (256, 32, 8, 64, 256, 256),
    (64, 32, 8, 128, 700, 768),
    (256, 32, 8, 128, 1100, 1280),
    # small B at long contexts, where fast's kernel has few blocks (added after s40)
    (1, 32, 8, 128, 4000, 4096),
    (1, 32, 8, 64, 30000, 30208),
    (8, 32, 8, 128, 8000, 8192),
    (16, 32, 8, 128, 2000, 2048),
)


def _bytes(x: mx.array) -> bytes:
    return np.array(x.astype(mx.float32)).tobytes()


def _attention(q, keys, values, valid):
    k, v = keys[:, :, :valid, :], values[:, :, :valid, :]
    mx.eval(k, v)  # MLX sends a slice to cuDNN only when it is evaluated
    out = mx.fast.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5)
    mx.eval(out)
    return out


def check(batch, hq, hkv, dim, valid, width) -> tuple[bool, str]:
    rng = np.random.default_rng([batch, hq, dim, valid])

    def rand(*shape):
        return mx.array(rng.standard_normal(shape).astype(np.float32)).astype(mx.bfloat16)

    q = rand(batch, hq, 1, dim)
    keys, values = rand(batch, hkv, width, dim), rand(batch, hkv, width, dim)
    mx.eval(q, keys, values)
    first = _bytes(_attention(q, keys, values, valid))
    repeat = all(_bytes(_attention(q, keys, values, valid)) == first for _ in range(4))
    tails = []
    for fill in ("random", "nan"):
        tail = rand(batch, hkv, width - valid, dim) if fill == "random" else mx.full(
            (batch, hkv, width - valid, dim), float("nan"), mx.bfloat16)
        k2 = mx.concatenate([keys[:, :, :valid, :], tail], axis=2)
        v2 = mx.concatenate([values[:, :, :valid, :], tail], axis=2)
        mx.eval(k2, v2)
        tails.append(_bytes(_attention(q, k2, v2, valid)) == first)
    k_copy = mx.contiguous(keys[:, :, :valid, :] * 1)
    v_copy = mx.contiguous(values[:, :, :valid, :] * 1)
    mx.eval(k_copy, v_copy)
    copy = _bytes(_attention(q, k_copy, v_copy, valid)) == first
    digest = hashlib.sha256(first).hexdigest()[:16]
    ok = repeat and all(tails)
    print(f"B={batch} heads {hq}/{hkv} D={dim} keys {valid} of {width}: repeat {repeat}; "
          f"tail random {tails[0]}, nan {tails[1]}; contiguous copy equal {copy}; "
          f"sha {digest}", flush=True)
    return ok, digest


def main() -> None:
    print("mlx", mx.__version__, mx.default_device(), "MLX_CUDA_USE_CUDNN_SDPA=",
          os.environ.get("MLX_CUDA_USE_CUDNN_SDPA", "(unset)"), flush=True)
    ok_all = True
    for shape in SHAPES:
        ok, _ = check(*shape)
        ok_all &= ok
    print(f"CUDNN DECODE REPEATABLE {'yes' if ok_all else 'no'}", flush=True)


if __name__ == "__main__":
    main()
