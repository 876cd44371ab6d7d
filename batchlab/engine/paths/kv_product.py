"""A layer's k and v projections as one GEMM at a decode step of several rows (``fast``),
where this device's GEMM gives each of them its own bits.

At a many-row decode step the k and v projections are narrow (llama-3.1-8b: N = 1024
against q's 4096 and gate/up's 14336) and leave the device half idle; through their
weights side by side (N = 2048) they run as one GEMM. A GEMM library may pick another
kernel for another N, and with it another order of the sums: on the H200, llama-3.1-8b's
k|v product gave k's and v's bits at 1-33 and 160-256 rows and not at 48-129, and
llama-3.2-1b's at every row count (reports/bench/cuda-sm90/issue28-kv/). So the verdict
is measured, not assumed: the first time a row count meets a weight shape, both forms
run once on a fixed random input and the fused one is used only if its columns equal the
two products byte for byte. Which kernel a GEMM library runs depends on the problem's
shape and types, not on the values it multiplies, so one input decides the shape.

``BATCHLAB_FAST_KV=0`` switches it off.
"""

from __future__ import annotations

import os
import weakref

import mlx.core as mx
from mlx import nn

from batchlab.engine.paths.fused_projections import FusedMemberLinear

MIN_ROWS = 2  # one row is a matrix-vector product: fused_projections' one-row groups
# (verdict key) -> whether the k|v product gives k's and v's bits; per process and device
_VERDICTS: dict[tuple, bool] = {}
# id(attention module) -> (the module, weakly; the k and v weights it was made from; their
# k|v weight)
_WEIGHTS: dict[int, tuple[weakref.ref, mx.array, mx.array, mx.array]] = {}


def switched_on() -> bool:
    return os.environ.get("BATCHLAB_FAST_KV", "1") == "1"


def keys_and_values(attn: nn.Module, x: mx.array) -> tuple[mx.array, mx.array] | None:
    """``(attn.k_proj(x), attn.v_proj(x))`` from one GEMM, when ``x`` has ``MIN_ROWS`` rows
    or more, both are plain unbiased ``nn.Linear`` layers of one input width and dtype,
    and the one GEMM gives their bits at this shape (``same_bits``); else ``None``."""
    k_proj, v_proj = attn.k_proj, attn.v_proj
    if x.ndim != 2 or x.shape[0] < MIN_ROWS or not _fusable(k_proj, v_proj):
        return None
    weight = _kv_weight(attn)
    key = (str(mx.default_device()), x.shape[0], tuple(k_proj.weight.shape),
           tuple(v_proj.weight.shape), str(weight.dtype), str(x.dtype))
    verdict = _VERDICTS.get(key)
    if verdict is None:
        verdict = _VERDICTS[key] = same_bits(k_proj.weight, v_proj.weight, weight,
                                             x.shape[0], x.dtype)
    if not verdict:
        return None
    product = x @ _stacked(weight)
    return product[0], product[1]


def same_bits(k_weight: mx.array, v_weight: mx.array, kv_weight: mx.array, rows: int,
              dtype) -> bool:
    """Whether the batched product through ``kv_weight`` (``_stacked``) equals ``x @
    k_weight.T`` and ``x @ v_weight.T`` byte for byte, on a fixed random ``x`` of ``rows``
    rows (evaluated here, once)."""
    x = mx.random.normal((rows, k_weight.shape[1]), key=mx.random.key(0)).astype(dtype)
    product, k, v = x @ _stacked(kv_weight), x @ k_weight.T, x @ v_weight.T
    same = mx.array_equal(product[0], k) & mx.array_equal(product[1], v)
    return bool(same.item())


def _stacked(kv_weight: mx.array) -> mx.array:
    """``(2, K, N)``: k's ``W.T`` and v's, as one batched GEMM's right operands. The
    product ``(2, rows, N)`` keeps each projection contiguous: a column slice of one
    ``(rows, 2N)`` product would hand RoPE strided keys, and on CUDA MLX's RoPE rounds
    strided input otherwise than contiguous input (reports/bench/cuda-sm90/issue28-kv/)."""
    n = kv_weight.shape[0] // 2
    return kv_weight.reshape(2, n, kv_weight.shape[1]).swapaxes(1, 2)


def _plain(layer) -> bool:
    """An ``nn.Linear`` that computes ``x @ W.T`` (a fused member outside ``fused()`` does)."""
    if type(layer) is FusedMemberLinear:
        return not layer._active()
    return type(layer) is nn.Linear


def _fusable(k_proj, v_proj) -> bool:
    # quantized and biased layers run other kernels (quantized_matmul, addmm)
    if not _plain(k_proj) or not _plain(v_proj):
        return False
    if "bias" in k_proj or "bias" in v_proj:
        return False
    k, v = k_proj.weight, v_proj.weight
    return k.shape == v.shape and k.dtype == v.dtype


def _kv_weight(attn: nn.Module) -> mx.array:
    """The module's k and v weights side by side (rows: k's outputs, then v's), made once
    per pair of weight arrays while the module lives (new weights, a new k|v weight)."""
    k, v = attn.k_proj.weight, attn.v_proj.weight
    entry = _WEIGHTS.get(id(attn))
    if entry is not None and entry[0]() is attn and entry[1] is k and entry[2] is v:
        return entry[3]
    weight = mx.concatenate([k, v], axis=0)
    mx.eval(weight)
    key = id(attn)
    _WEIGHTS[key] = (weakref.ref(attn, lambda _: _WEIGHTS.pop(key, None)), k, v, weight)
    return weight
